package consumer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

func deleteJournal(t *testing.T, h *onceflighttest.Harness, p int32, before int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "onceflight.journal", Partition: p, At: before})
	resp, err := kadm.NewClient(h.Client()).DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Error(); err != nil {
		t.Fatal(err)
	}
}

// journalOffset is the offset of key's first record in journal partition p.
func journalOffset(t *testing.T, h *onceflighttest.Harness, p int32, key string) int64 {
	t.Helper()
	for _, r := range h.Journal(p) {
		if string(r.Key) == key {
			return r.Offset
		}
	}
	t.Fatalf("%s not in journal partition %d", key, p)
	return -1
}

// Issue 7.1: the journal is created to keep what restore needs, an
// existing one that would not is refused, and records deleted before an
// executor read them (DeleteRecords standing in for retention) hold the
// partition instead of letting a remembered key execute again.
func TestJournalKeptCompleteAndGapsHeld(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Submit("c2", "order-1", "k2", `{}`)
	h.Outcomes(2, seen, nil)
	h.Stop()

	ctx := context.Background()
	rcs, err := kadm.NewClient(h.Client()).DescribeTopicConfigs(ctx, "onceflight.journal")
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]string{}
	for _, c := range rcs[0].Configs {
		if c.Value != nil {
			cfg[c.Key] = *c.Value
		}
	}
	if ms, _ := strconv.ParseInt(cfg["retention.ms"], 10, 64); time.Duration(ms)*time.Millisecond < 97*24*time.Hour {
		t.Fatalf("journal retention.ms %q, want >= key_memory + dedupe_retention", cfg["retention.ms"])
	}
	if cfg["cleanup.policy"] != "delete" || cfg["retention.bytes"] != "-1" || cfg["max.message.bytes"] != strconv.Itoa(consumer.Defaults().MaxMessageBytes) {
		t.Fatalf("journal configs: %v", cfg)
	}

	// Delete k1's records, keep k2's: a fresh executor must not trust it.
	p := partitioner.ForEntity("order-1", 3)
	deleteJournal(t, h, p, journalOffset(t, h, p, "k2"))
	h.Start(t.TempDir())
	h.Submit("c3", "order-1", "k1", `{}`)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(h.Ex.NotReady(), "held") {
		if time.Now().After(deadline) {
			t.Fatalf("partition %d not held after its journal lost records; not ready: %q", p, h.Ex.NotReady())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if n := h.EffectCount()["k1"]; n != 1 {
		t.Fatalf("k1 executed %d times after its journal records were deleted, want 1", n)
	}
	h.Stop()

	// An existing journal with too short a retention is refused at start:
	// Run returns the refusal at once (a complete executor, with a store,
	// so that only the check can end it before its context does).
	short := "3600000"
	if _, err := kadm.NewClient(h.Client()).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &short}}, "onceflight.journal"); err != nil {
		t.Fatal(err)
	}
	ex, err := consumer.New(consumer.Config{Brokers: h.Brokers, DataDir: t.TempDir(), Partitions: onceflighttest.Partitions}, h.Config, consumer.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = ex.Run(rctx)
	if err == nil || !strings.Contains(err.Error(), "retention.ms is 3600000") {
		t.Fatalf("start on a short-retention journal: Run returned %v, want the refusal naming retention.ms is 3600000", err)
	}
	if rctx.Err() != nil {
		t.Fatalf("Run ran until its context ended instead of refusing the journal at start")
	}
}

// Issues 7.2 and 7.8: when retention empties a journal partition, its
// markers go too. A fresh owner must still pick an epoch (and fencing
// tokens) above every earlier one, and an empty partition must restore.
func TestEpochAndTokensNeverGoBackAfterRetention(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	for i := range 6 {
		h.Submit(fmt.Sprintf("a%d", i), "order-7", fmt.Sprintf("a-%d", i), `{}`)
	}
	h.Outcomes(6, seen, nil)
	before := seen["a5"][0].Record
	h.Stop()
	p := partitioner.ForEntity("order-7", 3)
	end := h.Journal(p)
	deleteJournal(t, h, p, end[len(end)-1].Offset+2) // everything, commit marker included

	h.Start(t.TempDir())
	h.Submit("b1", "order-7", "b-1", `{}`)
	h.Outcomes(7, seen, nil)
	after := seen["b1"][0].Record
	if after.Status != schemas.StatusSucceeded {
		t.Fatalf("after retention: %+v", after)
	}
	if after.Epoch <= before.Epoch {
		t.Fatalf("epoch went back from %d to %d after retention removed the markers", before.Epoch, after.Epoch)
	}
	if after.FencingToken <= before.FencingToken {
		t.Fatalf("fencing token went back from %d to %d", before.FencingToken, after.FencingToken)
	}
}

// Issues 7.3 and 7.11: an epoch marker is fenced like every journal write
// (it is never visible outside a transaction that carried the group's
// generation), and work put back after an aborted transaction is retried
// without any new traffic.
func TestMarkersFencedAndAbortsRetriedInSilence(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var refuse atomic.Int32
	refuse.Store(3)
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if refuse.Add(-1) < 0 {
			return nil, nil, false
		}
		r := req.(*kmsg.TxnOffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.UnknownServerError.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
	h.Start(t.TempDir())
	h.Submit("c1", "order-1", "k1", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil) // no further traffic: the retry must come by itself
	if seen["c1"][0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("c1: %+v", seen["c1"][0].Record)
	}
	for p := range int32(3) {
		for _, r := range h.Journal(p) {
			for _, hd := range r.Headers {
				if hd.Key == "onceflight-kind" && string(hd.Value) == "epoch" && !r.Attrs.IsTransactional() {
					t.Fatalf("epoch marker at %d/%d written outside a fenced transaction", p, r.Offset)
				}
			}
		}
	}
	h.Stop()
	h.Audit()
}

// Issue 7.4: a partition count that changes while the executor runs stops
// new work loudly (not ready, halted), instead of failing restores forever
// or letting entities move; a restart on grown topics is refused too.
func TestPartitionGrowthHalts(t *testing.T) {
	h := onceflighttest.New(t)
	h.Tune = func(c *consumer.Config) { c.PartitionCheckInterval = 100 * time.Millisecond }
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Outcomes(1, seen, nil)
	ctx := context.Background()
	adm := kadm.NewClient(h.Client())
	if _, err := adm.CreatePartitions(ctx, 1, "onceflight.commands"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for h.Ex.Halted() == nil {
		if time.Now().After(deadline) {
			t.Fatal("executor did not halt after the commands topic grew")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h.Ex.Ready() || !strings.Contains(h.Ex.NotReady(), "onceflight.commands now has 4 partitions") {
		t.Fatalf("ready %v, reason %q", h.Ex.Ready(), h.Ex.NotReady())
	}
	h.Submit("c2", "order-1", "k2", `{}`)
	time.Sleep(time.Second)
	if n := h.EffectCount()["k2"]; n != 0 {
		t.Fatalf("k2 executed %d times by a halted executor", n)
	}
	h.Stop()

	// Grow the journal to match: a restart sees markers of 3 partitions.
	if _, err := adm.CreatePartitions(ctx, 1, "onceflight.journal", "onceflight.outcomes"); err != nil {
		t.Fatal(err)
	}
	h.Tune = nil
	h.Start(t.TempDir())
	deadline = time.Now().Add(20 * time.Second)
	for h.Ex.Halted() == nil {
		if time.Now().After(deadline) {
			t.Fatal("restart on grown topics did not halt")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := h.EffectCount()["k2"]; n != 0 {
		t.Fatalf("k2 executed %d times after the topics grew", n)
	}
}

// Issue 7.7: 200 KB of HTML-heavy data is a 200 KB record, not 1.2 MB, and
// other entities' commands are answered around it.
func TestLargeHTMLCommandDoesNotStopOthers(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	html := strings.Repeat(`<p class="x">&amp; <b>hi</b></p>`, 200_000/32)
	h.Submit("big", "order-1", "big-1", fmt.Sprintf(`{"body":%q}`, html))
	for i := range 5 {
		h.Submit(fmt.Sprintf("s%d", i), fmt.Sprintf("other-%d", i), fmt.Sprintf("s-%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(6, seen, nil)
	if o := seen["big"][0].Record; o.Status != schemas.StatusSucceeded {
		t.Fatalf("big: %s %+v", o.Status, o.Error)
	}
	for i := range 5 {
		if seen[fmt.Sprintf("s%d", i)][0].Record.Status != schemas.StatusSucceeded {
			t.Fatalf("s%d: %+v", i, seen[fmt.Sprintf("s%d", i)])
		}
	}
	p := partitioner.ForEntity("order-1", 3)
	for _, r := range h.Journal(p) {
		if len(r.Value) > 300_000 {
			t.Fatalf("journal record of %d bytes for %d bytes of data", len(r.Value), len(html))
		}
	}
	h.Stop()
	h.Audit()
}

// Issue 7.9: one entity with a backlog holds up no other partition:
// commands of other partitions are answered while it waits (and, since
// issue 24, no other entity of its own partition either:
// TestHotEntityDoesNotBlockItsPartition).
func TestHotEntityDoesNotStarveOthers(t *testing.T) {
	h := onceflighttest.New(t)
	release := make(chan struct{})
	svc := apifake.NewEffects(t, apifake.WithScript(func(key string, _ int) apifake.Fault {
		if strings.HasPrefix(key, "h-") { // the hot entity's: held in flight
			<-release
		}
		return apifake.None
	}))
	defer close(release)
	h.UseConfig(fmt.Sprintf("actions:\n  slow.call:\n    connector: http\n    url: %s\n    timeout: 60s\n", svc.URL("")))
	h.Tune = func(c *consumer.Config) {
		c.MaxBuffered = 20
		c.MaxBufferedPerEntity = 5
		c.MaxPollRecords = 5 // the bounds are soft by one poll
	}
	h.Start(t.TempDir())
	hot := partitioner.ForEntity("hot", 3)
	for i := range 40 {
		h.SubmitAction(fmt.Sprintf("h%d", i), "slow.call", "hot", fmt.Sprintf("h-%d", i), `{}`)
	}
	onceflighttest.WaitFor(t, 30*time.Second, "the hot entity's first request at the service", func() bool { return svc.InflightOf("") > 0 })
	var others []string
	for i := 0; len(others) < 5; i++ {
		ent := fmt.Sprintf("cold-%d", i)
		if partitioner.ForEntity(ent, 3) == hot {
			continue
		}
		id := "o" + strconv.Itoa(i)
		others = append(others, id)
		h.SubmitAction(id, "slow.call", ent, "k-"+ent, `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(5, seen, nil)
	for _, id := range others {
		if len(seen[id]) != 1 || seen[id][0].Record.Status != schemas.StatusSucceeded {
			t.Fatalf("%s: %+v (answered: %d)", id, seen[id], len(seen))
		}
	}
}

// Each attempt of one execution carries a larger fencing token than the
// attempt before it, so a late write of attempt 1 is refusable after
// attempt 2.
func TestFencingTokenGrowsPerAttempt(t *testing.T) {
	h := onceflighttest.New(t)
	svc := apifake.NewEffects(t, apifake.WithScript(func(_ string, n int) apifake.Fault {
		if n < 3 {
			return apifake.Fault{Before: true, Status: http.StatusServiceUnavailable, Body: "busy", ContentType: "text/plain"}
		}
		return apifake.None
	}))
	h.UseConfig(fmt.Sprintf("actions:\n  flaky.call:\n    connector: http\n    url: %s\n    timeout: 1s\n", svc.URL("")))
	h.Start(t.TempDir())
	h.SubmitAction("c1", "flaky.call", "order-1", "k1", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	rec := seen["c1"][0].Record
	posts, _, _ := svc.Counts("k1")
	if rec.Status != schemas.StatusSucceeded || len(posts) != 3 {
		t.Fatalf("%s after %d attempts", rec.Status, len(posts))
	}
	for i := 1; i < len(posts); i++ {
		if posts[i].Token <= posts[i-1].Token {
			t.Fatalf("attempt %d token %d not above attempt %d's %d", i+1, posts[i].Token, i, posts[i-1].Token)
		}
	}
	if rec.FencingToken != posts[2].Token {
		t.Fatalf("record token %d, last attempt's %d", rec.FencingToken, posts[2].Token)
	}
	h.Stop()
	h.Audit()
}

// Issue 7.6: an execution left in progress by an interrupted reconcile
// attempt is inherited like any other — the re-consumed reconcile request
// waits for its deadline and confirms — and the entity's next command does
// not run before that deadline (G1). The key does not stay in progress.
func TestInterruptedReconcileAttemptIsInherited(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	h := onceflighttest.New(t)
	var (
		mu       sync.Mutex
		phase    = 1 // 1: confirm unavailable, 2: confirm not found
		applied  bool
		k1Posts  int
		deadline time.Time
		k2At     time.Time
		hung     = make(chan struct{}, 1)
	)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPost && key == "k1":
			k1Posts++
			if k1Posts == 1 {
				http.Error(w, "lost", http.StatusInternalServerError) // not applied
				return
			}
			deadline, _ = time.Parse(time.RFC3339Nano, r.Header.Get("Onceflight-Deadline"))
			applied = true // the effect happens; the answer never comes back
			select {
			case hung <- struct{}{}:
			default:
			}
			mu.Unlock()
			select { // the executor gives up first
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
			mu.Lock()
		case r.Method == http.MethodPost:
			k2At = time.Now()
			fmt.Fprint(w, `{}`)
		case applied:
			fmt.Fprint(w, `{"applied":true}`)
			return
		case phase == 1:
			http.Error(w, "down", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	defer svc.Close()
	h.UseConfig(fmt.Sprintf(`reconcile:
  every: 200ms
actions:
  payments.refund:
    connector: http
    url: %[1]s/refunds
    confirm_url: %[1]s/refunds/{key}
    timeout: 10s
    confirm_timeout: 300ms
`, svc.URL))
	h.Tune = func(c *consumer.Config) { c.RevokeTimeout = 100 * time.Millisecond }
	dir := t.TempDir()
	h.Start(dir)
	h.SubmitAction("c1", "payments.refund", "order-1", "k1", `{"amount":1}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	if s := seen["c1"][0].Record.Status; s != schemas.StatusUnresolved {
		t.Fatalf("c1: %s", s)
	}
	mu.Lock()
	phase = 2 // the reconciler's confirmation now says "not found": attempt 2 goes out
	mu.Unlock()
	select {
	case <-hung:
	case <-time.After(20 * time.Second):
		t.Fatal("no reconcile attempt")
	}
	h.Stop() // interrupts attempt 2: its intent stays in progress in the journal

	h.Start(dir)
	h.SubmitAction("c2", "payments.refund", "order-1", "k2", `{"amount":2}`)
	for total := 2; len(seen["c2"]) == 0; total++ {
		h.Outcomes(total, seen, nil)
	}
	var settled bool
	for _, o := range seen["c1"] {
		settled = settled || o.Record.Status == schemas.StatusSucceeded
	}
	mu.Lock()
	defer mu.Unlock()
	if !settled {
		t.Fatalf("k1 not settled by confirmation: %+v", seen["c1"])
	}
	if k2At.Before(deadline) {
		t.Fatalf("k2 ran at %s, before k1's inherited attempt deadline %s (two executions of one entity at once)", k2At.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
	}
	if k1Posts != 2 {
		t.Fatalf("k1 posted %d times, want 2", k1Posts)
	}
	st, _, err := storeof.Executor(h.Ex).Lookup("order-1", "k1")
	if err != nil || st.Status != schemas.StatusSucceeded {
		t.Fatalf("k1 record: %s %v", st.Status, err)
	}
}

// Issue 7.7: a misrouted command whose forwarded copy would not fit the
// commands topic is not executed out of place and does not hold up other
// work: it is deadlettered by reference and answered too_large.
func TestForwardTooLargeIsAnsweredNotStuck(t *testing.T) {
	h := onceflighttest.New(t)
	h.Tune = func(c *consumer.Config) { c.MaxMessageBytes, c.MaxDataBytes = 64<<10, 32<<10 }
	h.Start(t.TempDir())
	c := schemas.Command{ID: "big", Source: "test", Type: "noop.ping", Subject: "order-1", IdempotencyKey: "k1", Data: []byte(`{}`)}
	r, err := schemas.EncodeCommand(c, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	// Baggage that brings the command just under the topic's limit: it
	// fits, its forwarded copy (two more headers) does not.
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: "x-baggage"})
	bag := &r.Headers[len(r.Headers)-1]
	for outbox.RecordSize(r) < 64<<10-30 {
		bag.Value = append(bag.Value, 'b')
	}
	// A producer with another partitioner: the entity's records land on
	// the wrong partition.
	r.Partition = (partitioner.ForEntity("order-1", 3) + 1) % 3
	manual, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	if err := manual.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.Submit("small", "order-2", "k2", `{}`)
	seen := map[string][]schemas.Outcome{}
	var dead []*kgo.Record
	h.Outcomes(2, seen, &dead)
	o := seen["big"]
	if len(o) != 1 || o[0].Record.Status != schemas.StatusRejected || o[0].Record.Error == nil || o[0].Record.Error.Code != schemas.CodeTooLarge {
		t.Fatalf("big: %+v (all: %+v)", o, seen)
	}
	if seen["small"][0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("small: %+v", seen["small"])
	}
	if n := h.EffectCount()["k1"]; n != 0 {
		t.Fatalf("k1 executed %d times", n)
	}
	deadletters(t, h, seen, &dead, 1)
	omitted := ""
	for _, hd := range dead[0].Headers {
		if hd.Key == schemas.HeaderDeadletterOmitted {
			omitted = string(hd.Value)
		}
	}
	if dead[0].Value != nil || !strings.Contains(omitted, "value") {
		t.Fatalf("deadletter not by reference: %d bytes, omitted %q", len(dead[0].Value), omitted)
	}
	h.Stop()
	h.Audit()
}
