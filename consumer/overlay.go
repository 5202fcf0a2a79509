package consumer

import "github.com/onceflight/onceflight/schemas"

// overlay is what later commands must see before Pebble does: records
// staged (chained, queued for a transaction) but not yet applied, the
// version each entity's last job left, and the keys claimed by commands in
// flight. It is guarded by pipeline.mu; every method expects it held.
//
// Entries belong to the partition ownership (*partState) they were made
// under: staged is not committed, and if that ownership ends the entry may
// never become visible, so an entry of another ownership is ignored.
type overlay struct {
	pending map[string]pendingRec
	// versions holds an entity only while some of its journal records are
	// staged but not in Pebble, or a job of it is queued or running.
	versions map[string]*versionEntry
	claims   map[string]string // key → fingerprint of the first claimant
}

// pendingRec is a staged record and the partition ownership it was staged
// under. Answering from it after that ownership ended would publish an
// outcome without its journal record.
type pendingRec struct {
	rec schemas.Record
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
	return overlay{pending: map[string]pendingRec{}, versions: map[string]*versionEntry{}, claims: map[string]string{}}
}

// stageRecords makes records visible to later lookups (chained, not yet
// committed).
func (o *overlay) stageRecords(st *partState, recs []schemas.Record) {
	for _, r := range recs {
		o.pending[r.IdempotencyKey] = pendingRec{rec: r, st: st}
	}
}

// record is the staged record of key, if one of a live ownership exists.
func (o *overlay) record(key string, live func(*partState) bool) (schemas.Record, bool) {
	pr, ok := o.pending[key]
	if ok && !live(pr.st) {
		delete(o.pending, key)
		return schemas.Record{}, false
	}
	return pr.rec, ok
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
// queue, whose versions are kept.
func (o *overlay) applied(recs []journaled, busy func(entity string) bool) {
	for _, j := range recs {
		r := j.rec
		if cur, ok := o.pending[r.IdempotencyKey]; ok && cur.rec.Hash == r.Hash {
			delete(o.pending, r.IdempotencyKey)
		}
		if ve, ok := o.versions[r.Entity]; ok {
			ve.unapplied--
			if !busy(r.Entity) && ve.unapplied <= 0 {
				delete(o.versions, r.Entity)
			}
		}
	}
}

// claim reserves a new key for fingerprint fp; false if another
// fingerprint holds it.
func (o *overlay) claim(key, fp string) bool {
	if have, ok := o.claims[key]; ok {
		return have == fp
	}
	o.claims[key] = fp
	return true
}

func (o *overlay) release(keys []string) {
	for _, k := range keys {
		delete(o.claims, k)
	}
}
