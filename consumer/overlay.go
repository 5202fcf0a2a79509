package consumer

import (
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// overlay is what later commands must see before Pebble does: records
// staged (chained, queued for a transaction) but not yet applied, the
// version each entity's last job left, and the keys claimed by commands in
// flight. It is guarded by pipeline.mu; every method expects it held.
//
// Entries belong to the partition ownership (*partState) they were made
// under: staged is not committed, and if that ownership ends the entry may
// never become visible, so an entry of another ownership is ignored.
type overlay struct {
	pending map[scopedKey]pendingRec
	// unique lists, per unique_by tuple, the staged records that carry it
	// (docs/configuration.md): a tuple's check must see a staged execution before
	// Pebble's b/ index does.
	unique map[uniqueRef][]scopedKey
	// versions holds an entity only while some of its journal records are
	// staged but not in Pebble, or a job of it is queued or running.
	versions map[string]*versionEntry
	claims   map[scopedKey]string // key → fingerprint of the first claimant
	// reconciled is when each record was last reconciled on request
	// (reconcileAllowed); entries older than the limit are swept, and it
	// holds at most maxReconcileRates. reconciledMin is a lower bound of
	// its times: no sweep can free anything before reconciledMin + limit.
	reconciled    map[scopedKey]time.Time
	reconciledMin time.Time
}

// maxReconcileRates bounds the reconcile rate map (reconcileAllowed):
// requests are unsigned, and one naming any existing record was counted,
// so requests for distinct records grew it without bound, each past 4 096
// sweeping all of it (TestReconcileRateMapBounded). 32 768 records
// reconciled per half reconcile.every (the reconciler's own requests
// included) is far above what an executor's unresolved records need;
// ~3 MB at most.
const maxReconcileRates = 1 << 15

// sweepReconcileRates is the size from which a reconcile request for a
// new record sweeps the map of its expired entries (reconcileAllowed):
// smaller, it is left to grow, as a sweep costs a pass over it.
const sweepReconcileRates = 4096

// scopedKey is an idempotency key in its scope, the entity (docs/events.md#execution-records): the
// same key for two entities is two executions.
type scopedKey struct{ entity, key string }

func scopeOf(r *schemas.Record) scopedKey { return scopedKey{r.Entity, r.IdempotencyKey} }

// uniqueRef is one unique_by tuple of an entity's action.
type uniqueRef struct{ entity, action, tuple string }

// pendingRec is a staged record and the partition ownership it was staged
// under. Answering from it after that ownership ended would publish an
// outcome without its journal record.
//
// rec is the staged emit's own record, which nothing changes once it is
// chained: a map value of a whole record is stored out of line (past
// 128 bytes), a heap object and a copy per staged record.
type pendingRec struct {
	rec *schemas.Record
	st  *partState
}

// versionEntry is an entity's version as its last job left it.
type versionEntry struct {
	v     int64
	owner *partState
	// unapplied counts the entity's staged journal records not yet in
	// Pebble.
	unapplied int
}

func newOverlay() overlay {
	return overlay{pending: map[scopedKey]pendingRec{}, unique: map[uniqueRef][]scopedKey{},
		versions: map[string]*versionEntry{}, claims: map[scopedKey]string{}, reconciled: map[scopedKey]time.Time{}}
}

// entries is the overlay's size in entries: staged records, entity
// versions and claimed keys (memory.go's gauges).
func (o *overlay) entries() int { return len(o.pending) + len(o.versions) + len(o.claims) }

// stageRecords makes records visible to later lookups (chained, not yet
// committed).
func (o *overlay) stageRecords(st *partState, recs []*schemas.Record) {
	for _, r := range recs {
		k := scopeOf(r)
		o.drop(k)
		o.pending[k] = pendingRec{rec: r, st: st}
		if r.UniqueKey != "" {
			u := uniqueRef{r.Entity, r.Action, r.UniqueKey}
			o.unique[u] = append(o.unique[u], k)
		}
	}
}

// drop forgets the staged record of k and its unique_by entry.
func (o *overlay) drop(k scopedKey) {
	pr, ok := o.pending[k]
	if !ok {
		return
	}
	delete(o.pending, k)
	if pr.rec.UniqueKey == "" {
		return
	}
	u := uniqueRef{pr.rec.Entity, pr.rec.Action, pr.rec.UniqueKey}
	l := o.unique[u]
	for i, x := range l {
		if x == k {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(o.unique, u)
	} else {
		o.unique[u] = l
	}
}

// record is the staged record of k, if one of a live ownership exists.
func (o *overlay) record(k scopedKey, live func(*partState) bool) (schemas.Record, bool) {
	pr, ok := o.pending[k]
	if ok && !live(pr.st) {
		o.drop(k)
		return schemas.Record{}, false
	}
	if !ok {
		return schemas.Record{}, false
	}
	return *pr.rec, true
}

// uniqueKeys lists the keys of staged records carrying tuple u.
func (o *overlay) uniqueKeys(u uniqueRef) []string {
	l := o.unique[u]
	out := make([]string, len(l))
	for i, k := range l {
		out[i] = k.key
	}
	return out
}

// version is the entity's version left under ownership st, if known.
func (o *overlay) version(entity string, st *partState) (int64, bool) {
	ve, ok := o.versions[entity]
	if !ok || ve.owner != st {
		// Left by an earlier ownership that may never have committed:
		// Pebble (restored) knows better.
		return 0, false
	}
	return ve.v, true
}

// setVersion records the version a job left and how many journal records
// it staged.
func (o *overlay) setVersion(entity string, st *partState, v int64, journaled int) {
	if ve, ok := o.versions[entity]; ok && ve.owner == st {
		ve.v = v
		ve.unapplied += journaled
	} else if journaled > 0 {
		o.versions[entity] = &versionEntry{v: v, owner: st, unapplied: journaled}
	}
}

// idle forgets an entity's version once it has no queue and Pebble holds
// everything it staged.
func (o *overlay) idle(entity string) {
	if ve, ok := o.versions[entity]; ok && ve.unapplied <= 0 {
		delete(o.versions, entity)
	}
}

// applied forgets what Pebble now holds; busy reports entities with a
// queue, whose versions are kept. Intents are not in Pebble: they stay
// until a later record of their key replaces them (stageRecords).
func (o *overlay) applied(recs []journaled, busy func(entity string) bool) {
	for _, j := range recs {
		if j.intent {
			continue
		}
		r := j.rec
		if cur, ok := o.pending[scopeOf(r)]; ok && cur.rec.Hash == r.Hash {
			o.drop(scopeOf(r))
		}
		if ve, ok := o.versions[r.Entity]; ok {
			ve.unapplied--
			if !busy(r.Entity) && ve.unapplied <= 0 {
				delete(o.versions, r.Entity)
			}
		}
	}
}

// forget drops r, staged under ownership st, which will never be applied
// (st was lost and its staged work dropped). Only entries of st are
// touched: a later ownership's entries for the same entity are its own.
func (o *overlay) forget(st *partState, r *schemas.Record, busy func(entity string) bool) {
	if cur, ok := o.pending[scopeOf(r)]; ok && cur.st == st && cur.rec.Hash == r.Hash {
		o.drop(scopeOf(r))
	}
	if ve, ok := o.versions[r.Entity]; ok && ve.owner == st {
		ve.unapplied--
		if !busy(r.Entity) && ve.unapplied <= 0 {
			delete(o.versions, r.Entity)
		}
	}
}

// forgetIntents drops the intents of keys, queued or committed under
// ownership st, which has ended: nothing will replace them, and a later
// ownership reads them from its restore.
func (o *overlay) forgetIntents(st *partState, keys []scopedKey) {
	for _, k := range keys {
		if cur, ok := o.pending[k]; ok && cur.st == st && cur.rec.Status == schemas.StatusInProgress {
			o.drop(k)
		}
	}
}

// claim reserves a new key for fingerprint fp; false if another
// fingerprint holds it.
func (o *overlay) claim(key scopedKey, fp string) bool {
	if have, ok := o.claims[key]; ok {
		return have == fp
	}
	o.claims[key] = fp
	return true
}

func (o *overlay) release(keys []scopedKey) {
	for _, k := range keys {
		delete(o.claims, k)
	}
}

// forgetIntent drops the overlay entry of intent r, queued under
// ownership st and dropped unwritten (committer.dropUnowned).
func (p *pipeline) forgetIntent(st *partState, r *schemas.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.mu.ov.pending[scopeOf(r)]; ok && cur.st == st && cur.rec.Hash == r.Hash {
		p.mu.ov.drop(scopeOf(r))
	}
}

// forgetIntents drops the open intents of ownership st, which has ended
// (committer.holdIntents).
func (p *pipeline) forgetIntents(st *partState) {
	keys := make([]scopedKey, 0, len(st.held.open))
	for k := range st.held.open {
		keys = append(keys, k)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.ov.forgetIntents(st, keys)
}

// intents lists the overlay's intents of live ownerships (storeof.Intents).
func (p *pipeline) intents() []schemas.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []schemas.Record
	for _, pr := range p.mu.ov.pending {
		if pr.rec.Status == schemas.StatusInProgress && !pr.st.lost.Load() && p.e.part(pr.st.p) == pr.st {
			out = append(out, *pr.rec)
		}
	}
	return out
}

// pendingUnique lists the keys of staged records of the entity's action
// that carry tuple (pipeline.mu is taken here).
func (p *pipeline) pendingUnique(entity, action, tuple string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.ov.uniqueKeys(uniqueRef{entity, action, tuple})
}

// reconcileAllowed reports whether a reconcile request for k may run now:
// none ran for it within every (<= 0: no limit), and the map has room. The
// map is swept when it grows (when anything in it can have expired), so
// it holds only recent requests; full of them, it refuses the request
// (as rate-limited: nothing is lost, the reconciler asks again).
func (p *pipeline) reconcileAllowed(k scopedKey, every time.Duration) bool {
	if every <= 0 {
		return true
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	ov := &p.mu.ov
	m := ov.reconciled
	last, ok := m[k]
	if ok && now.Sub(last) < every {
		return false
	}
	if !ok && len(m) >= sweepReconcileRates && now.Sub(ov.reconciledMin) >= every {
		low := now
		for x, t := range m {
			if now.Sub(t) >= every {
				delete(m, x)
			} else if t.Before(low) {
				low = t
			}
		}
		ov.reconciledMin = low
	}
	if !ok && len(m) >= maxReconcileRates {
		return false
	}
	if len(m) == 0 {
		ov.reconciledMin = now
	}
	m[k] = now
	return true
}
