package dedupe

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"slices"
	"sync/atomic"

	"github.com/onceflight/onceflight/schemas"
)

// Prefetch reads a poll's records ahead of their lookups, in one pass in
// key order through one iterator, where each command's lookup on its
// entity's worker was a seek of its own: a random key's seek starts over
// in every level (a table opened per level, its filter and index blocks
// found in the cache), while seeks in key order move forward through the
// same tables and blocks (BENCHMARKS.md, "Round 17 (repeats2)").
//
// A value read ahead is used only if it is still what a lookup would
// read: LookupPrefetched answers from it when no write of its record key
// can have returned since it was read, and looks the key up as Lookup
// does otherwise. recordWrites tells: every write that returns bumps the
// counter of each record key it wrote (Batch.finish: the slot of its
// scope), or, for the few writes that do not say which keys they wrote
// (Prune, the format's reset), a counter for all keys (guard). A prefetch
// reads both counters of its key before it takes its iterator, so the
// iterator sees every write whose bump the counters already hold; if both
// are unchanged when the value is used, nothing wrote the key since the
// value was read (a bump comes after its write is applied, and before the
// write returns). Keys sharing a slot only cost a lookup more.
type recordWrites struct {
	seed maphash.Seed
	// all counts the writes that may have written any record key.
	all atomic.Uint64
	// slots count the writes of record keys, by the hash of their scope.
	slots [recordWriteSlots]atomic.Uint64
}

// recordWriteSlots: a draining executor writes one record per new key; a
// value read ahead waits behind at most the buffered commands (1 024 by
// default) and what is staged, so ~6 % of prefetched values meet a write
// of their slot when every command writes (and are looked up again), and
// none when the commands are repeats, which write no record. 128 KiB.
const recordWriteSlots = 1 << 14

func (w *recordWrites) slot(sc []byte) uint32 {
	return uint32(maphash.Bytes(w.seed, sc) & (recordWriteSlots - 1))
}

// wrote bumps the slot of scope sc, after a write of it was applied.
func (w *recordWrites) wrote(sc string) {
	w.slots[maphash.String(w.seed, sc)&(recordWriteSlots-1)].Add(1)
}

// Prefetched is the record of one (entity, key) as Prefetch read it.
type Prefetched struct {
	entity, key string
	raw         []byte // the stored value (a copy), nil if absent
	found, read bool   // read: the value was read (else Lookup's)
	all, gen    uint64 // recordWrites' counters before the read
	slot        uint32
}

// PrefetchKey is the (entity, key) of a record to prefetch.
type PrefetchKey struct{ Entity, Key string }

// For reports whether p holds the record of (entity, key).
func (p *Prefetched) For(entity, key string) bool {
	return p.read && p.entity == entity && p.key == key
}

// Found reports whether Prefetch read a record of p's key: a hint for
// the executor's poll loop (whether the command may be a repeat), which
// still looks the key up through LookupPrefetched.
func (p *Prefetched) Found() bool { return p.read && p.found }

// Value is the stored value Prefetch read for p's key (nil if absent)
// and whether the key was found; read is false when Prefetch left the key
// unread (an error), which LookupPrefetched would look up again. It
// neither decodes nor checks for writes since the read: it is for a
// reader that needs only the bytes as they were when read, the bench's
// floor of a repeat (cmd/onceflight-bench, rawrepeat), not for the
// executor, whose lookups go through LookupPrefetched.
func (p *Prefetched) Value() (raw []byte, found, read bool) {
	return p.raw, p.found, p.read
}

// Prefetch reads the records of keys into out (one each, same order): in
// key order through one iterator, absent keys the presence filter never
// saw without a seek. A key it could not read (an error: it is reported
// by the lookup that reads it again) is left unread.
func (s *Store) Prefetch(keys []PrefetchKey, out []Prefetched) {
	if len(keys) == 0 || s.enter() != nil {
		return
	}
	defer s.leave()
	if s.usable() != nil {
		return
	}
	type want struct {
		rk []byte
		i  int
	}
	n := 0
	for _, k := range keys {
		n += len(prefixRecord) + len(k.Key) + 1 + len(k.Entity)
	}
	buf := make([]byte, 0, n)
	ws := make([]want, 0, len(keys))
	for i, k := range keys {
		start := len(buf)
		buf = appendRecordKey(buf, k.Entity, k.Key)
		rk := buf[start:len(buf):len(buf)]
		p := &out[i]
		sc := rk[len(prefixRecord):]
		*p = Prefetched{entity: k.Entity, key: k.Key, slot: s.recWrites.slot(sc)}
		// The counters first, then the filter and the iterator (the
		// order recordWrites relies on).
		p.all, p.gen = s.recWrites.all.Load(), s.recWrites.slots[p.slot].Load()
		if s.present.absent(sc) {
			p.read = true
			continue
		}
		ws = append(ws, want{rk, i})
	}
	if len(ws) == 0 {
		return
	}
	slices.SortFunc(ws, func(a, b want) int { return bytes.Compare(a.rk, b.rk) })
	it, w, err := s.getPointIter()
	if err != nil {
		return
	}
	defer s.putPointIter(it, w)
	for _, x := range ws {
		val, found, err := s.seekValue(it, x.rk)
		if err != nil {
			return
		}
		p := &out[x.i]
		p.found, p.read = found, true
		if found {
			p.raw = bytes.Clone(val)
		}
	}
}

// LookupPrefetched is LookupBytes, answered from p (a Prefetch of the same
// key) when no write of the key can have returned since p was read, and
// by a lookup of its own otherwise.
func (s *Store) LookupPrefetched(entity, key string, p *Prefetched) (schemas.Record, []byte, bool, error) {
	if !p.For(entity, key) || s.recWrites.all.Load() != p.all || s.recWrites.slots[p.slot].Load() != p.gen {
		return s.LookupBytes(entity, key)
	}
	if err := s.enter(); err != nil {
		return schemas.Record{}, nil, false, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return schemas.Record{}, nil, false, err
	}
	raw, found := p.raw, p.found
	// Used once: the record points into raw.
	p.raw, p.read = nil, false
	if !found {
		return schemas.Record{}, nil, false, nil
	}
	rec, err := schemas.UnmarshalRecordKeep(raw)
	if err != nil {
		return schemas.Record{}, nil, false, fmt.Errorf("dedupe: decode %q: %w", appendRecordKey(nil, entity, key), err)
	}
	return rec, raw, true, nil
}
