package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// Second tests of guarantees that one test alone caught when removed on
// purpose (issue 19, scripts/mutants): each is independent of the first —
// another set-up, another way of observing — so that a change that slips
// past one is still caught.

// within receives from ch, failing the test after d with what names the
// thing that did not happen: a test must never wait for ever.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
		panic("unreachable")
	}
}

// deadletters reads outcomes into seen and deadletter records into dead
// until dead holds n, failing after 30s with what is missing.
func deadletters(t *testing.T, h *onceflighttest.Harness, seen map[string][]schemas.Outcome, dead *[]*kgo.Record, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(*dead) < n {
		fs := h.Client().PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("timed out with %d of %d deadletter records", len(*dead), n)
		}
		for _, r := range fs.Records() {
			if r.Topic == "onceflight.deadletter" {
				*dead = append(*dead, r)
				continue
			}
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				t.Fatalf("undecodable outcome: %v", err)
			}
			seen[o.CausationID] = append(seen[o.CausationID], o)
		}
	}
}

// TestMalformedCommandsDeadlettered (G4): malformed commands — not a
// CloudEvent, with and without a record key naming an entity, and one
// missing its id — each go to the deadletter topic with a reason, the one
// with an entity is answered rejected invalid_command too, and the good
// command behind them on their partition is still answered.
func TestMalformedCommandsDeadlettered(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	p := partitioner.ForEntity("order-7", onceflighttest.Partitions)
	h.Produce(&kgo.Record{Topic: "onceflight.commands", Partition: p, Key: []byte("order-7"), Value: []byte("{not json")})
	h.Produce(&kgo.Record{Topic: "onceflight.commands", Value: []byte("not a cloudevent either")})
	noID := schemas.Command{ID: "x", Source: "test", Type: "noop.ping", Subject: "order-7", IdempotencyKey: "k-bad"}
	r, err := schemas.EncodeCommand(noID, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	for i, hd := range r.Headers {
		if hd.Key == "ce_id" {
			r.Headers = append(r.Headers[:i], r.Headers[i+1:]...)
			break
		}
	}
	h.Produce(r)
	h.Submit("good", "order-7", "k-good", `{}`)

	seen := map[string][]schemas.Outcome{}
	var dead []*kgo.Record
	deadletters(t, h, seen, &dead, 3)
	values := map[string]string{}
	for _, d := range dead {
		reason := kafkatest.HeaderValue(d, "onceflight-deadletter-reason")
		if reason == "" {
			t.Errorf("deadletter record %q has no reason", d.Value)
		}
		values[string(d.Value)] = reason
	}
	for _, v := range []string{"{not json", "not a cloudevent either"} {
		if _, ok := values[v]; !ok {
			t.Errorf("%q not deadlettered (deadletter holds %d records)", v, len(dead))
		}
	}
	if len(dead) != 3 {
		t.Errorf("%d deadletter records, want 3", len(dead))
	}
	noIDReason := false
	for _, reason := range values {
		noIDReason = noIDReason || strings.Contains(reason, `missing required attribute "id"`)
	}
	if !noIDReason {
		t.Errorf("the command without an id is not deadlettered for it: reasons %v", values)
	}
	h.Outcomes(3, seen, nil) // good, and the rejections of the two malformed commands that name order-7
	if o := seen["good"]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
		t.Errorf("the good command behind the malformed ones: %+v", o)
	}
	rejected := 0
	for id, os := range seen {
		if strings.HasPrefix(id, "onceflight.commands/") && os[0].Record.Entity == "order-7" && code(os[0]) == schemas.CodeInvalidCommand {
			rejected++
		}
	}
	if rejected != 2 {
		t.Errorf("%d malformed commands of order-7 answered rejected invalid_command, want 2 (outcomes: %d)", rejected, len(seen))
	}
}

// TestHeldDuplicateWaitsForAnOperator (on_duplicate: hold): a second
// execution of a unique_by tuple is held — not sent to the external
// system — and stays held when it is sent again; the operator's resolve
// --as rejected settles it without an effect.
func TestHeldDuplicateWaitsForAnOperator(t *testing.T) {
	h := onceflighttest.New(t)
	svc := newDecisionService(t, false)
	h.UseConfig(fmt.Sprintf(`actions:
  ship.once:
    connector: http
    url: %s/ship
    timeout: 2s
    unique_by: [parcel]
    on_duplicate: hold
`, svc.url))
	ks := withKeys(t, h)
	h.Start(t.TempDir())
	h.SubmitAction("s1", "ship.once", "cust-1", "ship-1", `{"parcel":"p-1"}`)
	h.SubmitAction("s2", "ship.once", "cust-1", "ship-2", `{"parcel":"p-1","again":true}`)
	h.SubmitAction("s2-again", "ship.once", "cust-1", "ship-2", `{"parcel":"p-1","again":true}`)
	h.SubmitAction("s3", "ship.once", "cust-1", "ship-3", `{"parcel":"p-2"}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(4, seen, nil)
	for _, id := range []string{"s1", "s3"} {
		if o := seen[id][0]; o.Record.Status != schemas.StatusSucceeded {
			t.Errorf("%s: %s %s, want succeeded", id, o.Record.Status, code(o))
		}
	}
	if o := seen["s2"][0]; o.Record.Status != schemas.StatusHeld || code(o) != schemas.CodeDuplicateBusinessKey || !strings.Contains(o.Record.Error.Message, `"ship-1"`) {
		t.Fatalf("s2, a second shipment of p-1: %s %+v, want held duplicate_business_key naming ship-1", o.Record.Status, o.Record.Error)
	}
	if o := seen["s2-again"][0]; o.Record.Status != schemas.StatusHeld || !o.Replayed {
		t.Errorf("s2 sent again: %s replayed=%v, want the held record replayed", o.Record.Status, o.Replayed)
	}
	if n := svc.effects("ship-2"); n != 0 {
		t.Fatalf("the held shipment reached the service %d times", n)
	}
	h.Decide(ks, "no", schemas.TypeResolve, "cust-1", schemas.Decision{Key: "ship-2", As: "rejected", Reason: "already shipped", By: "ann"})
	h.Outcomes(6, seen, nil)
	if got := seen["s2"]; len(got) != 2 || got[1].Record.Status != schemas.StatusRejected || got[1].Record.Resolution == nil {
		t.Errorf("s2 after resolve --as rejected: %+v", got)
	}
	for key, want := range map[string]int{"ship-1": 1, "ship-2": 0, "ship-3": 1} {
		if n := svc.effects(key); n != want {
			t.Errorf("%s reached the service %d times, want %d", key, n, want)
		}
	}
	h.Audit()
}

// TestJournalGapHoldsUntilAccepted (G2): journal records of a partition
// deleted before a new owner read them hold the partition — counted in
// onceflight_held_partitions, nothing of it answered — until the loss is
// accepted with AcceptJournalGap (serve --accept-journal-gap); then the
// partition is processed again, and a key whose records were lost is new
// work (the accepted loss).
func TestJournalGapHoldsUntilAccepted(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Submit("c2", "order-1", "k2", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	h.Stop()
	p := partitioner.ForEntity("order-1", onceflighttest.Partitions)
	deleteJournal(t, h, p, journalOffset(t, h, p, "k2")) // k1's records go, k2's stay

	h.Reg = prometheus.NewRegistry()
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 30*time.Second, fmt.Sprintf("onceflight_held_partitions to count partition %d, whose journal lost k1's records", p), func() bool {
		v, _ := kafkatest.Gauge(t, h.Reg, "onceflight_held_partitions")
		return v == 1
	})
	h.Submit("c3", "order-1", "k1", `{}`) // k1 again: its record is gone
	_, elsewhere := entitiesOn(p, 1)
	h.Submit("other", elsewhere, "k9", `{}`)
	h.Outcomes(3, seen, nil) // other's answer: other partitions are processed
	if len(seen["c3"]) != 0 {
		t.Fatalf("c3 answered on a held partition: %+v", seen["c3"])
	}
	if n := h.EffectCount()["k1"]; n != 1 {
		t.Fatalf("k1 took effect %d times while its partition was held, want 1", n)
	}
	h.Stop()

	h.Reg = prometheus.NewRegistry()
	h.Tune = func(c *consumer.Config) { c.AcceptJournalGap = true }
	h.Start(t.TempDir())
	h.Submit("c4", "order-1", "k2", `{}`) // k2's record was kept
	until(h, seen, func() bool { return len(seen["c3"]) > 0 && len(seen["c4"]) > 0 })
	if v, _ := kafkatest.Gauge(t, h.Reg, "onceflight_held_partitions"); v != 0 {
		t.Errorf("onceflight_held_partitions = %v after the gap was accepted", v)
	}
	if o := seen["c3"][0]; o.Record.Status != schemas.StatusSucceeded || o.Replayed {
		t.Errorf("c3 after the gap was accepted: %s replayed=%v, want executed (k1's record was lost)", o.Record.Status, o.Replayed)
	}
	if o := seen["c4"][0]; !o.Replayed {
		t.Errorf("c4, a repeat of k2 whose record was kept: %s replayed=%v, want a replay", o.Record.Status, o.Replayed)
	}
}

// TestEntityLanesNeverOverlap (G1): commands of one entity sent together
// reach the external system one at a time and in order, while another
// entity's run beside them; the service holds each request a moment so
// that two in flight for one entity would meet there.
func TestEntityLanesNeverOverlap(t *testing.T) {
	h := onceflighttest.New(t)
	svc := newEffectService(t, 30*time.Millisecond, nil)
	h.UseConfig(effectsYAML(svc, "5s"))
	h.Start(t.TempDir())
	const n = 6
	for i := range n {
		for _, ent := range []string{"lane-a", "lane-b"} {
			h.SubmitAction(fmt.Sprintf("%s-%d", ent, i), "pay.call", ent, fmt.Sprintf("%s-k%d", ent, i), `{}`)
		}
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2*n, seen, nil)
	if overlaps := svc.Overlaps(); len(overlaps) > 0 {
		t.Errorf("requests of one entity in flight together: %v", overlaps)
	}
	for _, ent := range []string{"lane-a", "lane-b"} {
		for i := 1; i < n; i++ {
			prev, cur := seen[fmt.Sprintf("%s-%d", ent, i-1)][0].Record, seen[fmt.Sprintf("%s-%d", ent, i)][0].Record
			if prev.Status != schemas.StatusSucceeded || cur.Status != schemas.StatusSucceeded {
				t.Fatalf("%s: %s %s, %s %s", ent, prev.IdempotencyKey, prev.Status, cur.IdempotencyKey, cur.Status)
			}
			if cur.StartedAt.Before(*prev.FinishedAt) {
				t.Errorf("%s: %s started at %v, before %s (sent before it) finished at %v", ent, cur.IdempotencyKey, cur.StartedAt, prev.IdempotencyKey, prev.FinishedAt)
			}
		}
	}
	h.Audit()
}

// TestOffsetCommitsCarryTheGeneration (KIP-447, G1/G4): every offset
// commit the executor adds to a transaction names its group member and
// generation, so that the coordinator can refuse it once the member has
// been replaced; a commit without them (generation -1, no member) is
// accepted from anyone, a zombie too. Observed at the broker: each
// TxnOffsetCommit is recorded as it arrives, and its member must be one
// of the group's (the last one: the current member's).
func TestOffsetCommitsCarryTheGeneration(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	type commit struct {
		member string
		gen    int32
	}
	var (
		mu      sync.Mutex
		commits []commit
	)
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.TxnOffsetCommitRequest)
		mu.Lock()
		commits = append(commits, commit{r.MemberID, r.Generation})
		mu.Unlock()
		return nil, nil, false
	})
	h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
	h.Start(t.TempDir())
	for i := range 6 {
		h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("k%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(6, seen, nil)
	members := h.GroupMembers()
	mu.Lock()
	defer mu.Unlock()
	if len(commits) == 0 {
		t.Fatal("no TxnOffsetCommit reached the broker")
	}
	for i, cm := range commits {
		if cm.member == "" || cm.gen < 0 {
			t.Errorf("offset commit %d of %d: member %q generation %d, want the member's id and generation", i+1, len(commits), cm.member, cm.gen)
		}
	}
	// The executor's member may have been replaced before (a recreated
	// client); the last commit is the current member's.
	if last := commits[len(commits)-1]; !slices.Contains(members, last.member) {
		t.Errorf("the last offset commit names member %q, not one of the group's %v", last.member, members)
	}
}

// TestJournalRetentionFollowsKeyMemory (G2): the journal created for a
// key_memory of an hour keeps records for that long; an executor started
// later with a longer key_memory (here the default) would need records the
// journal deletes, so it refuses to start — Run returns at once, naming
// retention.ms — instead of forgetting keys it promises to remember.
func TestJournalRetentionFollowsKeyMemory(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("dedupe_retention: 1h\nkey_memory: 1h\nactions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n", h.Effects))
	h.Start(t.TempDir())
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Outcomes(1, map[string][]schemas.Outcome{}, nil)
	h.Stop()

	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n", h.Effects))
	n := h.StartNode("later", t.TempDir(), onceflighttest.NodeOptions{})
	err := within(t, n.Done, 30*time.Second, "Run to refuse the journal kept for a shorter key_memory")
	n.Done <- err // for the node's Stop
	if err == nil || !strings.Contains(err.Error(), "retention.ms") {
		t.Fatalf("start with key_memory beyond the journal's retention: Run returned %v, want the refusal naming retention.ms", err)
	}
}
