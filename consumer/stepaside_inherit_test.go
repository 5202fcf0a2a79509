package consumer_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/connectors/limit"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// A new command whose job first settled another key its entity had in
// progress (job.settleInFlight: an earlier owner's execution, whose own
// command is not consumed again) must not step aside: the settlement is an
// answer of the job's (an emit), and a job with emits is staged as the
// command's answer — the command's offset committed with nothing of its
// own, never executed nor answered. It waits for its system instead, and
// runs once the system is back.
func TestSteppedAsideNotAfterSettlingAnInheritedKey(t *testing.T) {
	t.Parallel() // it waits for an inherited deadline and the revoke timeout at its stop
	h, api := stuckDownHarness(t)
	h.Start(t.TempDir()) // makes the topics
	onceflighttest.WaitFor(t, 30*time.Second, "partitions owned", func() bool { return len(h.Ex.Owned()) == onceflighttest.Partitions })
	h.Stop()
	// Entity ent-e has key ent-e-0 in progress, left by an earlier owner
	// whose action is no longer configured: settled unresolved at once.
	// A fresh data dir restores it from the journal.
	p := partitioner.ForEntity("ent-e", onceflighttest.Partitions)
	past := time.Now().Add(-time.Minute).UTC()
	rec := schemas.Record{
		IdempotencyKey: "ent-e-0", Entity: "ent-e", Action: "gone.action", Status: schemas.StatusInProgress,
		Attempts: 1, StartedAt: &past, Deadline: &past, Epoch: 1000,
		Command: schemas.CommandRef{ID: "e0", Partition: p},
	}
	v, err := wire.MarshalRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	h.Produce(&kgo.Record{Topic: "onceflight.journal", Partition: p, Key: []byte(rec.IdempotencyKey), Value: v,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}, {Key: schemas.HeaderEpoch, Value: strconv.AppendInt(nil, 1000, 10)}}})

	dir := t.TempDir()
	h.Start(dir)
	// The system goes down with KeepWaiting (1) commands waiting, of
	// entities of other partitions: nothing of ent-e's partition holds
	// its committed offset back.
	var downIDs []string
	for i := 0; len(downIDs) < 3; i++ {
		ent := fmt.Sprintf("ent-x%d", i)
		if partitioner.ForEntity(ent, onceflighttest.Partitions) == p {
			continue
		}
		id := fmt.Sprintf("x%d", i)
		downIDs = append(downIDs, id)
		h.SubmitAction(id, "payments.refund", ent, ent+"-0", `{}`)
	}
	onceflighttest.WaitFor(t, 30*time.Second, "commands stepped aside", func() bool { return h.Ex.Parked() > 0 })
	waiting := func() int { return systemStats(h, "payments").Waiting }
	before := waiting()
	h.SubmitAction("e1", "payments.refund", "ent-e", "ent-e-1", `{}`)
	// Either the settlement is answered (with e1's offset) or e1 waits.
	seen := map[string][]schemas.Outcome{}
	onceflighttest.WaitFor(t, 30*time.Second, "ent-e-0 settled or e1 waiting", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := h.Client().PollFetches(ctx)
		cancel()
		for _, r := range fs.Records() {
			if r.Topic != "onceflight.outcomes" {
				continue
			}
			if o, err := schemas.DecodeOutcome(r); err == nil {
				seen[o.CausationID] = append(seen[o.CausationID], o)
			}
		}
		return len(seen["e0"]) > 0 || waiting() > before
	})
	t.Logf("seen e0 %d, waiting %d (before %d), parked %d, stats %+v", len(seen["e0"]), waiting(), before, h.Ex.Parked(), h.Ex.SystemStats())
	h.Stop()
	api.down.Store(false)
	h.Start(dir)
	if got := outcomesOf(t, h, seen, append([]string{"e0", "e1"}, downIDs...), 60*time.Second); got[schemas.StatusSucceeded] != 4 {
		t.Fatalf("after the system came back: %v", got)
	}
	if got := seen["e0"][0].Record.Status; got != schemas.StatusUnresolved {
		t.Errorf("ent-e-0 settled %s, want unresolved", got)
	}
	api.mu.Lock()
	if n := api.seen["ent-e-1"]; n != 1 {
		t.Errorf("ent-e-1 applied %d times, want 1", n)
	}
	api.mu.Unlock()
	h.Stop()
}

// stuckDownHarness is a harness whose action payments.refund goes to a
// system, payments, that is down (api.down) and stays so while the
// executor runs: one request at a time (KeepWaiting 1), its breaker opens
// at the first "down" answer and probes once an hour.
func stuckDownHarness(t *testing.T) (*onceflighttest.Harness, *toggleAPI) {
	api := &toggleAPI{seen: map[string]int{}, order: map[string][]string{}}
	api.down.Store(true)
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`systems:
  payments:
    max_concurrent: 1
    breaker:
      after: 1
      probe_every: 1h
actions:
  payments.refund:
    connector: http
    url: %s/refunds
    system: payments
`, serve(t, api)))
	h.Tune = func(c *consumer.Config) { c.MaxInflight, c.MaxBuffered, c.RevokeTimeout = 8, 16, 2*time.Second }
	return h, api
}

// systemStats is the executor's stats of system name.
func systemStats(h *onceflighttest.Harness, name string) limit.Stats {
	for _, s := range h.Ex.SystemStats() {
		if s.Name == name {
			return s
		}
	}
	return limit.Stats{}
}
