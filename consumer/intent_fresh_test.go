package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// TestIntentServedFromOverlayAndFinalFresh: an intent is in the overlay,
// read before Pebble, from the moment it is queued and until a later
// record of its key is staged in its place (Pebble never gets it from the
// committer); and since no intent ever reaches Pebble, the final record of
// a key the job read as absent is written fresh (without reading the key
// again, dedupe.PutNewRecordBytes), its intents notwithstanding. The
// consumer tests run with dedupe.CheckAbsent (main_test.go), which fails
// any fresh write over a stored record, so the http and fault tests check
// that "fresh" is never wrong.
func TestIntentServedFromOverlayAndFinalFresh(t *testing.T) {
	e, st, pl, c := committerOfOnePartition("")
	j := &job{p: pl, e: e}
	k := scopedKey{"e-1", "k-1"}
	j.absent = []scopedKey{k, {"e-1", "k-other"}, k} // k read twice

	rec := func(key string, attempt int) schemas.Record {
		d := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
		return schemas.Record{Entity: "e-1", IdempotencyKey: key, Action: "a.b", Status: schemas.StatusInProgress,
			Attempts: attempt, Deadline: &d, Command: schemas.CommandRef{ID: "c-" + key, Partition: 0}}
	}
	// ask queues an intent; the waiter gives up at once (nothing commits
	// here), the intent stays queued.
	ask := func(r schemas.Record) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := j.intent(ctx, 0, r); err != context.Canceled {
			t.Fatalf("intent of %q: err %v, want the canceled wait", r.IdempotencyKey, err)
		}
	}
	seen := func() schemas.Record {
		t.Helper()
		got, ok := pl.pendingRecord(k)
		if !ok {
			t.Fatal("intent not in the overlay: a read between it and its final would miss it")
		}
		return got
	}
	ask(rec("k-1", 1))
	if got := seen(); got.Status != schemas.StatusInProgress || got.Attempts != 1 {
		t.Fatalf("overlay has %s attempt %d, want the first intent", got.Status, got.Attempts)
	}
	ask(rec("k-1", 2))
	if got := seen(); got.Attempts != 2 {
		t.Fatalf("overlay has attempt %d, want the later intent", got.Attempts)
	}
	final := rec("k-1", 2)
	final.Status = schemas.StatusSucceeded
	j.add(emit{journal: &final, outcome: &final})
	j.markFresh()
	if !j.emits[0].fresh {
		t.Error("final record of a key read absent, after its intents: not fresh (its Pebble write reads the key again)")
	}
	if len(j.absent) != 1 || j.absent[0] != (scopedKey{"e-1", "k-other"}) {
		t.Errorf("absent after the final: %v, want only the key never written", j.absent)
	}
	c.stage(st, 7, j.emits, 0)
	if got := seen(); got.Status != schemas.StatusSucceeded {
		t.Fatalf("overlay has %s after the final was staged, want the final", got.Status)
	}
	// The intents were queued before the final, in journal order.
	c.mu.Lock()
	n := len(c.mu.queue)
	c.mu.Unlock()
	if n != 3 {
		t.Fatalf("queue holds %d entries, want 2 intents and the answer", n)
	}
}
