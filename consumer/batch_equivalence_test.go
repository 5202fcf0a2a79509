package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// batchCase is one command of TestBatchAnsweredAsOneByOne, all for the same
// entity, in this order.
type batchCase struct{ id, key, data, what string }

var batchCases = []batchCase{
	{"c1", "k1", `{"order_id":"o-1"}`, "a new key: executed, succeeded; holds o-1"},
	{"c2", "k1", `{"order_id":"o-1"}`, "a repeat of k1: answered from its record"},
	{"c3", "k1", `{"order_id":"o-1","amount":2}`, "k1 reused with other data: rejected key_reused"},
	{"c4", "k2", `{"order_id":"o-1"}`, "a duplicate of o-1 under a new key: held"},
	{"c5", "k3", `{"order_id":"o-2"}`, "a new key, another tuple: executed"},
	{"c6", "k2", `{"order_id":"o-1"}`, "a repeat of the held k2: answered held"},
	{"c7", "k4", `{"order_id":"o-1"}`, "another duplicate of o-1: held too"},
}

// batchAnswer is what a command's answers are made of, without what differs
// from run to run (times, executor, epoch, hashes, tokens).
type batchAnswer struct {
	OutcomeID, Key, Status, Code, Message string
	Replayed                              bool
	Attempts                              int
	EntityVersion                         int64
	Result                                string
	UniqueKey, EstablishedBy              string
	CommandID                             string
	CommandOffset                         int64
}

func answerOf(o schemas.Outcome) batchAnswer {
	r := o.Record
	a := batchAnswer{OutcomeID: o.ID, Key: r.IdempotencyKey, Status: string(r.Status), Replayed: o.Replayed,
		Attempts: r.Attempts, EntityVersion: r.EntityVersion, Result: string(r.Result),
		UniqueKey: r.UniqueKey, EstablishedBy: r.EstablishedBy, CommandID: r.Command.ID, CommandOffset: r.Command.Offset}
	if r.Error != nil {
		a.Code, a.Message = r.Error.Code, r.Error.Message
	}
	return a
}

// batchRun is everything a run leaves that the comparison looks at.
type batchRun struct {
	answers map[string][]batchAnswer // by command id
	effects map[string]int           // key → times the noop connector ran it
	journal []string                 // the journal's records: key and status, in order
}

// TestBatchAnsweredAsOneByOne (issue 24, "no guarantee weakens"): commands
// of one entity — a new key, a repeat of it, the key reused with other
// data, a unique_by duplicate held (on_duplicate: hold), a repeat of the
// held key, another new key and another duplicate — delivered to the
// executor in one poll are answered exactly as when each is sent alone and
// its outcome awaited before the next: the same outcomes (ids, statuses,
// codes, messages, results, versions, replayed or not), the same effects
// and the same journal records in the same order.
//
// One poll: the batch run produces the seven commands in one record batch
// before its executor starts, and asserts (a kgo fetch hook in the
// executor's clients) that the commands topic's first fetched batch held
// all seven: a record batch is never split across fetches, and one poll
// (MaxPollRecords 500) takes all that is buffered.
func TestBatchAnsweredAsOneByOne(t *testing.T) {
	oneByOne := runBatchCases(t, false)
	batched := runBatchCases(t, true)
	for _, c := range batchCases {
		t.Logf("%s %-60s %+v", c.id, c.what, batched.answers[c.id])
	}
	t.Logf("journal %v, effects %v", batched.journal, batched.effects)

	for _, c := range batchCases {
		if a, b := oneByOne.answers[c.id], batched.answers[c.id]; !reflect.DeepEqual(a, b) {
			t.Errorf("%s (%s):\n one by one: %+v\n in a batch: %+v", c.id, c.what, a, b)
		}
	}
	if !reflect.DeepEqual(oneByOne.effects, batched.effects) {
		t.Errorf("effects: one by one %v, in a batch %v", oneByOne.effects, batched.effects)
	}
	if !reflect.DeepEqual(oneByOne.journal, batched.journal) {
		t.Errorf("journal records:\n one by one: %v\n in a batch: %v", oneByOne.journal, batched.journal)
	}

	// What one-by-one processing answers, so that both runs agreeing on
	// something else (every command rejected, say) fails too.
	want := map[string]string{"c1": "succeeded/", "c2": "succeeded/", "c3": "rejected/" + schemas.CodeKeyReused,
		"c4": "held/" + schemas.CodeDuplicateBusinessKey, "c5": "succeeded/", "c6": "held/" + schemas.CodeDuplicateBusinessKey,
		"c7": "held/" + schemas.CodeDuplicateBusinessKey}
	for _, c := range batchCases {
		got := oneByOne.answers[c.id]
		if len(got) != 1 || got[0].Status+"/"+got[0].Code != want[c.id] {
			t.Errorf("%s (%s): %+v, want one answer %s", c.id, c.what, got, want[c.id])
		}
	}
	if !oneByOne.answers["c2"][0].Replayed || oneByOne.answers["c1"][0].Replayed {
		t.Errorf("c1 replayed %v, c2 replayed %v: want a fresh answer, then a replay", oneByOne.answers["c1"][0].Replayed, oneByOne.answers["c2"][0].Replayed)
	}
	if n := oneByOne.effects["k1"] + oneByOne.effects["k3"]; n != 2 || len(oneByOne.effects) != 2 {
		t.Errorf("effects %v: want k1 and k3 once each, nothing else", oneByOne.effects)
	}
}

// runBatchCases runs batchCases on a cluster of its own: all produced in
// one batch before the executor starts (batched), or one at a time, each
// outcome awaited before the next command is produced.
func runBatchCases(t *testing.T, batched bool) batchRun {
	t.Helper()
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(governanceYAML, h.Effects))
	const entity = "order-1"
	records := make([]*kgo.Record, len(batchCases))
	for i, c := range batchCases {
		r, err := schemas.EncodeCommand(schemas.Command{ID: c.id, Source: "test", Type: "pay.hold", Subject: entity,
			IdempotencyKey: c.key, Data: json.RawMessage(c.data)}, schemas.Binary)
		if err != nil {
			t.Fatal(err)
		}
		r.Topic = "onceflight.commands"
		records[i] = r
	}

	var fetched fetchedBatches
	seen := map[string][]schemas.Outcome{}
	if batched {
		// The topics exist once an executor has run; start one, stop it,
		// then queue the batch and start the executor that answers it.
		h.Start(t.TempDir())
		onceflighttest.WaitFor(t, 30*time.Second, "executor ready", func() bool { return h.Ex.Ready() })
		h.Stop()
		// Manual flushing: all seven are buffered before anything is
		// sent, so they leave in one record batch (the harness's client,
		// with linger 0, could send the first alone).
		prod, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.ManualFlushing())
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var produced sync.WaitGroup
		var prodErr error
		var mu sync.Mutex
		for _, r := range records {
			produced.Add(1)
			prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
				defer produced.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil && prodErr == nil {
					prodErr = err
				}
			})
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		produced.Wait()
		if prodErr != nil {
			t.Fatal(prodErr)
		}
		h.Tune = func(c *consumer.Config) { c.KafkaOpts = append(c.KafkaOpts, kgo.WithHooks(&fetched)) }
		h.Start(t.TempDir())
		h.Outcomes(len(batchCases), seen, nil)
		if got := fetched.first("onceflight.commands"); got != len(batchCases) {
			t.Fatalf("the commands' first fetched batch held %d records, want all %d in one poll", got, len(batchCases))
		}
	} else {
		h.Start(t.TempDir())
		for i, r := range records {
			h.Produce(r)
			h.Outcomes(i+1, seen, nil)
			if len(seen[batchCases[i].id]) != 1 {
				t.Fatalf("%s: %d outcomes after it was sent alone", batchCases[i].id, len(seen[batchCases[i].id]))
			}
		}
	}
	// Nothing more arrives later: a settle of the held keys would be a
	// second outcome.
	h.Stop()

	run := batchRun{answers: map[string][]batchAnswer{}, effects: map[string]int{}}
	for id, os := range seen {
		for _, o := range os {
			run.answers[id] = append(run.answers[id], answerOf(o))
		}
	}
	for k, n := range h.EffectCount() {
		run.effects[k] = n
	}
	for _, r := range h.JournalAll() {
		run.journal = append(run.journal, r.IdempotencyKey+":"+string(r.Status))
	}
	h.Audit()
	return run
}

// fetchedBatches records, per topic, how many records the first fetched
// batch of that topic held (kgo.HookFetchBatchRead).
type fetchedBatches struct {
	mu     sync.Mutex
	firstN map[string]int
}

func (f *fetchedBatches) first(topic string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.firstN[topic]
}

func (f *fetchedBatches) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.firstN == nil {
		f.firstN = map[string]int{}
	}
	if _, ok := f.firstN[topic]; !ok {
		f.firstN[topic] = m.NumRecords
	}
}
