package audit

import (
	"bytes"
	"hash/maphash"

	"github.com/onceflight/onceflight/schemas"
)

// recordMemo keeps what an outcome event needs of the journal records
// decoded lately, found by their exact bytes. The executor publishes a
// journal record's bytes as its outcome's data (a repeat's outcome too),
// so most outcomes carry a record the audit has just decoded from the
// journal; one found here takes that record's fields instead of being
// decoded again (round 14 (audit) in BENCHMARKS.md: decoding outcomes'
// records was the largest item of the audit's CPU).
//
// A record is found by a maphash of its bytes and then compared byte for
// byte with a copy of them: only identical bytes match, so an outcome
// whose record differs in anything, its hash member included, is decoded
// as before, and the facts taken are exactly the ones decoding its bytes
// would give. The copies live in two arenas of memoArena bytes (the
// latest records and the ones before them), reused: the memo holds at
// most 2 × memoArena bytes of records and 2 × memoEntries entries,
// whatever the number of keys (docs/memory.md#audit).
//
// It is written between decoding passes (add, on one goroutine) and only
// read while records are decoded on every core (find).
type recordMemo struct {
	seed maphash.Seed
	gen  [2]memoGen // gen[0] the latest records, gen[1] the ones before
}

// memoGen is one generation of the memo.
type memoGen struct {
	arena []byte
	at    map[uint64]int32 // maphash of a record's bytes -> its entry
	ents  []memoEntry
}

// memoEntry is a journal record's bytes (in its generation's arena) and
// the fields of it that factsOf reads.
type memoEntry struct {
	off, n     int32
	key        string
	entity     string
	status     schemas.Status
	command    schemas.CommandRef
	err        *schemas.Error
	resolution *schemas.Resolution
}

// memoArena and memoEntries bound each generation: variables so that a
// test can make the memo turn over. 2 MiB holds about 2 000 of the
// executor's records, more than the outcomes of a partition lag behind
// its journal when both are read together (Run's steps).
var (
	memoArena   = 2 << 20
	memoEntries = 8192
)

// useMemo gives a the recordMemo Run decodes with.
func (a *auditor) useMemo() { a.memo = newRecordMemo() }

func newRecordMemo() *recordMemo {
	m := &recordMemo{seed: maphash.MakeSeed()}
	for i := range m.gen {
		m.gen[i].at = map[uint64]int32{}
	}
	return m
}

// sum is the memo's hash of a record's bytes; decode computes it for a
// journal record on the worker that decodes it.
func (m *recordMemo) sum(raw []byte) uint64 { return maphash.Bytes(m.seed, raw) }

// add keeps rec, decoded from raw whose sum is h. A record larger than
// an arena is not kept; a sum already kept keeps its first record (two
// records with one sum are too rare to matter, and the second is then
// decoded).
func (m *recordMemo) add(h uint64, raw []byte, rec *schemas.Record) {
	if len(raw) > memoArena {
		return
	}
	g := &m.gen[0]
	if len(g.arena)+len(raw) > memoArena || len(g.ents) >= memoEntries {
		m.gen[0], m.gen[1] = m.gen[1], m.gen[0]
		g = &m.gen[0]
		if g.arena == nil {
			g.arena = make([]byte, 0, memoArena)
		}
		g.arena = g.arena[:0]
		clear(g.ents)
		g.ents = g.ents[:0]
		clear(g.at)
	}
	if g.arena == nil {
		g.arena = make([]byte, 0, memoArena)
	}
	if _, ok := g.at[h]; ok {
		return
	}
	g.at[h] = int32(len(g.ents))
	g.ents = append(g.ents, memoEntry{off: int32(len(g.arena)), n: int32(len(raw)),
		key: rec.IdempotencyKey, entity: rec.Entity, status: rec.Status, command: rec.Command,
		err: rec.Error, resolution: rec.Resolution})
	g.arena = append(g.arena, raw...)
}

// find returns the fields factsOf reads of the journal record whose
// bytes are exactly raw, if the memo has it.
func (m *recordMemo) find(raw []byte) (schemas.Record, bool) {
	if m == nil {
		return schemas.Record{}, false
	}
	h := m.sum(raw)
	for i := range m.gen {
		g := &m.gen[i]
		j, ok := g.at[h]
		if !ok {
			continue
		}
		e := &g.ents[j]
		if bytes.Equal(g.arena[e.off:e.off+e.n], raw) {
			return schemas.Record{IdempotencyKey: e.key, Entity: e.entity, Status: e.status,
				Command: e.command, Error: e.err, Resolution: e.resolution}, true
		}
	}
	return schemas.Record{}, false
}
