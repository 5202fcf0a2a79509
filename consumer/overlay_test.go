package consumer

import (
	"strconv"
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

// TestReconcileRateMapBounded: reconcile requests are unsigned, and every
// one that names an existing record was counted in the rate map until
// half reconcile.every passed: a stream of requests naming distinct
// records (any status) grew it without bound, and each request past 4 096
// swept the whole map (quadratic). The map now holds at most
// maxReconcileRates entries; a request that finds it full of recent ones
// is refused (dropped as rate-limited: the reconciler asks again).
func TestReconcileRateMapBounded(t *testing.T) {
	p := &pipeline{}
	p.mu.ov = newOverlay()
	const n = 40_000
	allowed := 0
	for i := range n {
		if p.reconcileAllowed(scopedKey{"order-1", strconv.Itoa(i)}, time.Hour) {
			allowed++
		}
	}
	if got := len(p.mu.ov.reconciled); got > 1<<15 {
		t.Fatalf("rate map holds %d entries after %d requests for distinct records", got, n)
	}
	if allowed == n {
		t.Fatal("every request allowed past the map's bound")
	}
	// Once entries are older than the interval, room is made again.
	old := time.Now().Add(-2 * time.Hour)
	for k := range p.mu.ov.reconciled {
		p.mu.ov.reconciled[k] = old
	}
	p.mu.ov.reconciledMin = old
	if !p.reconcileAllowed(scopedKey{"order-2", "k"}, time.Hour) {
		t.Fatal("refused with every entry expired")
	}
}
