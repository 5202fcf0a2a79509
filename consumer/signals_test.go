package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/internal/testlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// Issue 11: ready only while the brokers answer. Every request is refused
// (connection closed) for a while: readiness turns false within the
// session timeout, names the reason, and comes back once they answer again.
func TestReadyFollowsBrokerContact(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
	h.Reg = prometheus.NewRegistry()
	h.Tune = func(cfg *consumer.Config) { cfg.SessionTimeout = 2 * time.Second }
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 30*time.Second, "ready", h.Ex.Ready)
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "e1", "k1", `{}`)
	h.Outcomes(1, seen, nil)

	var down atomic.Bool
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("broker down (test)"), true
	})
	down.Store(true)
	onceflighttest.WaitFor(t, 20*time.Second, "not ready while the brokers do not answer", func() bool { return !h.Ex.Ready() })
	// The membership goes first (a refused heartbeat: onLost); once the
	// session timeout has passed without an answer, the reason names the
	// brokers.
	onceflighttest.WaitFor(t, 20*time.Second, "the reason to name the brokers", func() bool {
		return !h.Ex.Ready() && strings.Contains(h.Ex.NotReady(), "no answer from the brokers")
	})
	onceflighttest.WaitFor(t, 5*time.Second, "onceflight_ready 0", func() bool { v, _ := kafkatest.Gauge(t, h.Reg, "onceflight_ready"); return v == 0 })

	down.Store(false)
	onceflighttest.WaitFor(t, 60*time.Second, "ready again once the brokers answer", h.Ex.Ready)
	h.Submit("c2", "e1", "k2", `{}`)
	h.Outcomes(2, seen, nil)
	if o := seen["c2"]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("after recovery: %+v", o)
	}
}

// TestReadyOnceRestoredWithoutAFetch: an executor whose restore has just
// ended is ready at once. The broker holds every fetch of the group client
// (of the commands topic) and every heartbeat, which before counted alone
// as contact with the brokers; the assignment (SyncGroup) and the
// restore's epoch-marker transactions (Produce, TxnOffsetCommit, EndTxn)
// are answered, and they are contact enough.
func TestReadyOnceRestoredWithoutAFetch(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
	// The commands topic is created here to learn its id: a fetch names
	// its topics by id (Fetch v13+).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mmb := fmt.Sprint(outbox.DefaultMaxMessageBytes)
	created, err := kadm.NewClient(h.Client()).CreateTopic(ctx, onceflighttest.Partitions, -1,
		map[string]*string{"max.message.bytes": &mmb}, "onceflight.commands")
	if err != nil || created.Err != nil {
		t.Fatalf("create the commands topic: %v %v", err, created.Err)
	}
	release := make(chan struct{})
	var fetchesHeld, heartbeatsHeld atomic.Int32
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			if rt.TopicID == created.ID || rt.Topic == created.Topic {
				fetchesHeld.Add(1)
				c.SleepControl(func() { <-release })
				break
			}
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Heartbeat), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		heartbeatsHeld.Add(1)
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	// A heartbeat shares its connection with the transactions' requests:
	// held before the restore's epoch markers, it would hold them too. So
	// the first heartbeat comes long after the restore: no cooperative
	// balancer (a cooperative member heartbeats 500ms after it joins) and
	// a long interval, in a long session.
	n := h.StartNode("A", t.TempDir(), onceflighttest.NodeOptions{
		Tune:      func(cfg *consumer.Config) { cfg.SessionTimeout = 30 * time.Second },
		KafkaOpts: []kgo.Opt{kgo.Balancers(kgo.StickyBalancer()), kgo.HeartbeatInterval(10 * time.Second)},
	})
	// Released before the node's stop (cleanups run last first): its
	// leave and last commit go out on the connections the holds block.
	t.Cleanup(func() { close(release) })
	onceflighttest.WaitFor(t, 20*time.Second, "ready once restored, with no fetch or heartbeat answered", n.Ex.Ready)
	if got := len(n.Ex.Owned()); got != onceflighttest.Partitions {
		t.Fatalf("ready owning %d partitions, want %d", got, onceflighttest.Partitions)
	}
	// The hold catches the group client's fetches: its first one is held.
	onceflighttest.WaitFor(t, 20*time.Second, "the group client's first fetch, held", func() bool { return fetchesHeld.Load() > 0 })
	if !n.Ex.Ready() {
		t.Errorf("not ready while its first fetch is held: %s", n.Ex.NotReady())
	}
	if hb := heartbeatsHeld.Load(); hb > 0 {
		t.Logf("%d heartbeats held", hb)
	}
}

// Issue 11: the lag gauge is 0 once everything is answered, transaction
// markers included (a forwarded command leaves one in the commands topic),
// and it counts commands that are consumed but stuck.
func TestLagCountsUnansweredCommandsOnly(t *testing.T) {
	h := onceflighttest.New(t)
	h.Reg = prometheus.NewRegistry()
	release := make(chan struct{})
	// slow.call is called only for the entity "stuck": held in flight.
	svc := apifake.NewEffects(t, apifake.WithScript(func(string, int) apifake.Fault {
		<-release
		return apifake.None
	}))
	defer close(release)
	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n  slow.call:\n    connector: http\n    url: %s\n    timeout: 60s\n", svc.URL("")))
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 30*time.Second, "ready", h.Ex.Ready)

	// A command on the wrong partition is forwarded in a transaction.
	produceMisrouted(t, h, "fwd", "moved", "k-fwd")
	for i := range 5 {
		h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("e%d", i), fmt.Sprintf("k%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(6, seen, nil)
	allZero := func() bool {
		for p := range 3 {
			if v, ok := kafkatest.Gauge(t, h.Reg, "onceflight_consumer_lag", "partition", fmt.Sprint(p)); !ok || v != 0 {
				return false
			}
		}
		return true
	}
	onceflighttest.WaitFor(t, 15*time.Second, "lag 0 on every partition after forwards and transactions", allZero)

	stuck := partitioner.ForEntity("stuck", 3)
	for i := range 4 {
		h.SubmitAction(fmt.Sprintf("s%d", i), "slow.call", "stuck", fmt.Sprintf("s-%d", i), `{}`)
	}
	onceflighttest.WaitFor(t, 15*time.Second, "lag 4 while the entity's first command does not finish", func() bool {
		v, _ := kafkatest.Gauge(t, h.Reg, "onceflight_consumer_lag", "partition", fmt.Sprint(stuck))
		return v == 4
	})
	for i := range 3 {
		h.SubmitAction(fmt.Sprintf("t%d", i), "slow.call", "stuck", fmt.Sprintf("t-%d", i), `{}`)
	}
	onceflighttest.WaitFor(t, 15*time.Second, "lag growing to 7", func() bool {
		v, _ := kafkatest.Gauge(t, h.Reg, "onceflight_consumer_lag", "partition", fmt.Sprint(stuck))
		return v == 7
	})
}

// produceMisrouted writes a noop.ping command for entity to a partition
// that is not the entity's (of 3), as a producer with another partitioner
// would: the executor forwards it in a transaction.
func produceMisrouted(t *testing.T, h *onceflighttest.Harness, id, entity, key string) {
	t.Helper()
	manual, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	r, err := schemas.EncodeCommand(schemas.Command{ID: id, Source: "test", Type: "noop.ping", Subject: entity, IdempotencyKey: key}, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic, r.Partition = "onceflight.commands", (partitioner.ForEntity(entity, 3)+1)%3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := manual.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// Issue 11: one log line per answer a person may need: unresolved,
// not allowed, deadlettered, forwarded — with key, entity and offset.
func TestNotableAnswersAreLogged(t *testing.T) {
	h := onceflighttest.New(t)
	// Past the timeout: ambiguous, and nothing can confirm.
	svc := apifake.NewEffects(t, apifake.WithDelay(func() time.Duration { return time.Second }))
	h.UseConfig(fmt.Sprintf(`actions:
  noop.ping:
    connector: noop
  only.ops:
    connector: noop
    allowed_sources: [ops]
  pay.out:
    connector: http
    url: %s
    timeout: 200ms
    max_attempts: 1
`, svc.URL("")))
	logs := &testlog.Buffer{}
	h.Tune = func(c *consumer.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) }
	h.Start(t.TempDir())
	h.SubmitAction("u1", "pay.out", "acct-1", "pay-1", `{}`)
	h.SubmitAction("n1", "only.ops", "acct-2", "ops-1", `{}`)
	h.Produce(&kgo.Record{Topic: "onceflight.commands", Key: []byte("acct-3"), Value: []byte("not a cloudevent")})
	produceMisrouted(t, h, "f1", "moved", "k-f1")
	for _, want := range []string{
		`msg="execution unresolved: an operator must confirm or resolve it" key=pay-1 entity=acct-1 action=pay.out`,
		`msg="command rejected: source not allowed" key=ops-1 entity=acct-2 action=only.ops`,
		`msg="command deadlettered"`,
		`msg="command forwarded to its entity's partition" entity=moved`,
	} {
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(logs.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line %s in:\n%s", want, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Issue 8: the intent before an attempt is skipped only for an effectless
// connector (noop without an effects file); a noop with an effects file —
// the chaos tests' stand-in for a real effect — still journals its intent
// first. Both answer a repeat from the record (G2).
func TestIntentSkippedOnlyWhenEffectless(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  noop.pure:\n    connector: noop\n  noop.ping:\n    connector: noop\n    effects_file: %s\n", h.Effects))
	h.Start(t.TempDir())
	h.SubmitAction("p1", "noop.pure", "ent-pure", "k-pure", `{}`)
	h.SubmitAction("e1", "noop.ping", "ent-fx", "k-fx", `{}`)
	h.SubmitAction("p2", "noop.pure", "ent-pure", "k-pure", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(3, seen, nil)
	if o := seen["p2"]; len(o) != 1 || !o[0].Replayed || o[0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("repeat of the effectless key: %+v", o)
	}
	states := func(entity, key string) []schemas.Status {
		var out []schemas.Status
		for _, r := range h.Journal(partitioner.ForEntity(entity, 3)) {
			if wire.JournalKind(r) != schemas.KindRecord {
				continue
			}
			rec, err := schemas.UnmarshalRecord(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Entity == entity && rec.IdempotencyKey == key {
				out = append(out, rec.Status)
			}
		}
		return out
	}
	if got := states("ent-pure", "k-pure"); len(got) != 1 || got[0] != schemas.StatusSucceeded {
		t.Errorf("effectless noop journaled %v, want only [succeeded]", got)
	}
	if got := states("ent-fx", "k-fx"); len(got) != 2 || got[0] != schemas.StatusInProgress || got[1] != schemas.StatusSucceeded {
		t.Errorf("noop with an effects file journaled %v, want [in_progress succeeded]", got)
	}
	h.Audit()
}

// TestLagPassesAbortedProducerTransactions: a producer writes commands in
// transactions and aborts some. Read committed, their records never reach
// the executor, but they and the transaction markers hold offsets between
// the commands it does answer; the watermark must pass them, or the lag
// never reaches 0 and a restart consumes answered commands again.
func TestLagPassesAbortedProducerTransactions(t *testing.T) {
	h := onceflighttest.New(t)
	h.Reg = prometheus.NewRegistry()
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 30*time.Second, "ready", h.Ex.Ready)
	txp, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.TransactionalID("test-producer"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer txp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inTxn := func(commit bool, ids ...string) {
		t.Helper()
		if err := txp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			r, err := schemas.EncodeCommand(schemas.Command{ID: id, Source: "test", Type: "noop.ping", Subject: "e1", IdempotencyKey: "k-" + id, Data: json.RawMessage(`{}`)}, schemas.Binary)
			if err != nil {
				t.Fatal(err)
			}
			r.Topic = "onceflight.commands"
			if err := txp.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txp.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	var answered []string
	for round := range 3 {
		inTxn(false, fmt.Sprintf("aborted%d-a", round), fmt.Sprintf("aborted%d-b", round))
		plain := fmt.Sprintf("plain%d", round)
		h.Submit(plain, "e1", "k-"+plain, `{}`)
		committed := fmt.Sprintf("committed%d", round)
		inTxn(true, committed)
		answered = append(answered, plain, committed)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(len(answered), seen, nil)
	kafkatest.OneOutcomeEach(t, seen, answered)
	for id := range seen {
		if strings.HasPrefix(id, "aborted") {
			t.Errorf("a command of an aborted transaction was answered: %s", id)
		}
	}
	p := partitioner.ForEntity("e1", 3)
	onceflighttest.WaitFor(t, 15*time.Second, "lag 0 past aborted records and markers", func() bool {
		v, ok := kafkatest.Gauge(t, h.Reg, "onceflight_consumer_lag", "partition", fmt.Sprint(p))
		return ok && v == 0
	})
	h.Audit()
}
