package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// TestIntentOfAbsentKeyIsFresh: the first intent of a key the job read as
// absent is queued fresh (written without reading the key again,
// dedupe.PutNewRecordBytes); its later intents, the final record, and an
// intent of a key the job never read absent are not — each of those may
// replace a stored record whose index entries must go. The consumer tests
// run with dedupe.CheckAbsent (main_test.go), which fails any fresh write
// over a stored record, so the http and fault tests check the other half:
// that "fresh" is never wrong.
func TestIntentOfAbsentKeyIsFresh(t *testing.T) {
	e := &Executor{}
	e.mu.parts = map[int32]*partState{0: {p: 0}}
	c := newCommitter(e, nil, nil)
	j := &job{p: &pipeline{cm: c}, e: e}
	k := scopedKey{"e-1", "k-1"}
	j.absent = []scopedKey{k, {"e-1", "k-other"}, k} // k read twice

	rec := func(key string, attempt int) schemas.Record {
		d := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
		return schemas.Record{Entity: "e-1", IdempotencyKey: key, Action: "a.b", Status: schemas.StatusInProgress,
			Attempts: attempt, Deadline: &d, Command: schemas.CommandRef{ID: "c-" + key, Partition: 0}}
	}
	// ask queues an intent and reports whether it went fresh; the waiter
	// gives up at once (nothing commits here), the intent stays queued.
	ask := func(r schemas.Record) bool {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := j.intent(ctx, 0, r); err != context.Canceled {
			t.Fatalf("intent of %q: err %v, want the canceled wait", r.IdempotencyKey, err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.mu.queue[len(c.mu.queue)-1].intent.fresh
	}
	if !ask(rec("k-1", 1)) {
		t.Error("first intent of a key read absent: not fresh (its Pebble write reads the key again)")
	}
	if ask(rec("k-1", 2)) {
		t.Error("second intent of the key: fresh, but the first is its stored record")
	}
	if ask(rec("k-2", 1)) {
		t.Error("intent of a key never read absent: fresh")
	}
	final := rec("k-1", 2)
	final.Status = schemas.StatusSucceeded
	j.add(emit{journal: &final, outcome: &final})
	j.markFresh()
	if j.emits[0].fresh {
		t.Error("final record after the key's intent: fresh")
	}
	if len(j.absent) != 1 || j.absent[0] != (scopedKey{"e-1", "k-other"}) {
		t.Errorf("absent after the intents: %v, want only the key never written", j.absent)
	}
}
