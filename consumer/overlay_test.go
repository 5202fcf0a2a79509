package consumer

import (
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// TestOverlayUniqueFollowsPending: a staged record's unique_by entry goes
// when the record is applied, replaced or its ownership ends, so a check
// never sees a tuple holder Pebble and the overlay both lack.
func TestOverlayUniqueFollowsPending(t *testing.T) {
	o := newOverlay()
	st := &partState{}
	u := uniqueRef{"order-1", "pay", "sha256:t"}
	r := schemas.Record{IdempotencyKey: "a1", Entity: "order-1", Action: "pay", UniqueKey: "sha256:t", Status: schemas.StatusInProgress, Hash: "h1"}
	o.stageRecords(st, []*schemas.Record{&r})
	if got := o.uniqueKeys(u); len(got) != 1 || got[0] != "a1" {
		t.Fatalf("staged holder: %q", got)
	}
	if got := o.uniqueKeys(uniqueRef{"order-2", "pay", "sha256:t"}); len(got) != 0 {
		t.Fatalf("other entity sees the tuple: %q", got)
	}
	r2 := r
	r2.Status, r2.Hash = schemas.StatusSucceeded, "h2"
	o.stageRecords(st, []*schemas.Record{&r2})
	if got := o.uniqueKeys(u); len(got) != 1 {
		t.Fatalf("restaged record listed %d times", len(got))
	}
	o.applied([]journaled{{rec: &r2}}, func(string) bool { return false })
	if got := o.uniqueKeys(u); len(got) != 0 {
		t.Fatalf("applied record still listed: %q", got)
	}
	o.stageRecords(st, []*schemas.Record{&r})
	if _, ok := o.record(scopeOf(&r), func(*partState) bool { return false }); ok {
		t.Fatal("record of a lost ownership returned")
	}
	if got := o.uniqueKeys(u); len(got) != 0 {
		t.Fatalf("record of a lost ownership still listed: %q", got)
	}
}

// TestReconcileRateLimit: one (entity, key) is reconciled on request at
// most once per interval; other keys and entities are not held back.
func TestReconcileRateLimit(t *testing.T) {
	p := &pipeline{}
	p.mu.ov = newOverlay()
	k := scopedKey{"order-1", "k1"}
	if !p.reconcileAllowed(k, time.Hour) {
		t.Fatal("first request refused")
	}
	if p.reconcileAllowed(k, time.Hour) {
		t.Fatal("second request within the interval allowed")
	}
	if !p.reconcileAllowed(scopedKey{"order-2", "k1"}, time.Hour) || !p.reconcileAllowed(scopedKey{"order-1", "k2"}, time.Hour) {
		t.Fatal("another record held back")
	}
	if !p.reconcileAllowed(k, 0) {
		t.Fatal("no interval: refused")
	}
	p.mu.ov.reconciled[k] = time.Now().Add(-2 * time.Hour)
	if !p.reconcileAllowed(k, time.Hour) {
		t.Fatal("request after the interval refused")
	}
}
