package audit

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// spill is a map from digests to V of which at most max entries are in
// memory: when a partition has more keys, entities, answers or answered
// commands than that, the entries in memory are written to Run's
// temporary store (the outcome ids' Pebble database) and looked up there
// when memory lacks them. Records of one key come close together in a
// partition, so after a spill almost every lookup is either of an entry
// still in memory or of a new one, which the spill's Bloom filter answers
// without reading the disk. It is what bounds the audit's memory whatever
// the number of keys in a partition (docs/memory.md#audit).
//
// Check has no store: its spills keep everything in memory.
type spill[V any] struct {
	mem  map[digest]V
	max  int      // entries in memory before they are written out; 0: never
	st   *idStore // nil: never spill
	kind byte     // the key prefix of this map's entries in st
	gen  uint32   // bumped by reset, so earlier entries are not found
	// seen filters the entries written out in this generation; nil
	// before the first spill.
	seen filter
	// spilled counts the entries written out in this generation (some
	// may be written again when they change).
	spilled int
	enc     func([]byte, V) []byte
	dec     func([]byte) (V, error)
	// broken stops the use of st after a failure, which failed reports
	// (Run returns the first).
	broken bool
	failed func(error)
	// live, if set, is told how many entries memory gains or loses
	// (the auditor's live count).
	live func(delta int)
}

func (m *spill[V]) count(delta int) {
	if m.live != nil && delta != 0 {
		m.live(delta)
	}
}

func (m *spill[V]) fail(err error) {
	m.broken = true
	if m.failed != nil {
		m.failed(fmt.Errorf("audit: state store: %w", err))
	}
}

// spillFilterBits is the size of a spill's filter: 1 MiB, four probes:
// about 2 % false positives at a million entries written out, each of
// which costs a lookup, never a wrong answer.
const spillFilterBits = 1 << 23

// newSpill makes a spill that counts its entries in a's live count and,
// once a has a store (useStore), spills to it.
func newSpill[V any](a *auditor, kind byte, enc func([]byte, V) []byte, dec func([]byte) (V, error)) *spill[V] {
	m := &spill[V]{mem: map[digest]V{}, kind: kind, enc: enc, dec: dec, live: a.grow}
	storeSpill(a, m)
	return m
}

// key is the store key of d in this generation.
func (m *spill[V]) key(d digest) []byte {
	k := make([]byte, 0, 5+len(d))
	k = append(k, m.kind)
	k = binary.BigEndian.AppendUint32(k, m.gen)
	return append(k, d[:]...)
}

// get returns d's entry, from memory or from what was written out.
func (m *spill[V]) get(d digest) (V, bool) {
	v, ok := m.mem[d]
	if ok || m.seen == nil || m.broken || !m.seen.maybeHas(d) {
		return v, ok
	}
	b, closer, err := m.st.db.Get(m.key(d))
	if errors.Is(err, pebble.ErrNotFound) {
		return v, false
	}
	if err != nil {
		m.fail(err)
		return v, false
	}
	defer closer.Close()
	if v, err = m.dec(b); err != nil {
		m.fail(fmt.Errorf("entry %x: %w", d, err))
		return v, false
	}
	return v, true
}

// set stores d's entry in memory, and writes out every entry in memory
// once there are more than max.
func (m *spill[V]) set(d digest, v V) {
	if _, ok := m.mem[d]; !ok {
		m.count(1)
	}
	m.mem[d] = v
	if m.st == nil || m.max <= 0 || len(m.mem) <= m.max || m.broken {
		return
	}
	if m.seen == nil {
		m.seen = newFilter(spillFilterBits)
	}
	b := m.st.db.NewBatch()
	defer b.Close()
	var buf []byte
	for d, v := range m.mem {
		buf = m.enc(buf[:0], v)
		if err := b.Set(m.key(d), buf, nil); err != nil {
			m.fail(err)
			return
		}
		m.seen.add(d)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		m.fail(err)
		return
	}
	m.spilled += len(m.mem)
	m.count(-len(m.mem))
	m.mem = map[digest]V{}
}

// reset drops every entry: those in memory, and those written out, which
// a new generation no longer finds. A range deletion hides them from
// lookups that pass the filter too; their disk is freed when the store is
// removed at the end (it never compacts, see openIDStore).
func (m *spill[V]) reset() {
	m.count(-len(m.mem))
	m.mem = map[digest]V{}
	if m.spilled > 0 && !m.broken {
		from := []byte{m.kind, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(from[1:], m.gen)
		to := []byte{m.kind, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(to[1:], m.gen+1)
		if err := m.st.db.DeleteRange(from, to, pebble.NoSync); err != nil {
			m.fail(err)
		}
	}
	m.gen++
	m.seen, m.spilled = nil, 0
}

// filter is a Bloom filter of digests of a fixed size, four probes: four
// slices of the digest, which is a hash already.
type filter []uint64

func newFilter(bits int) filter { return make(filter, bits/64) }

func (f filter) probes(d digest) [4]uint32 {
	var ps [4]uint32
	mask := uint32(len(f)*64 - 1)
	for i := range ps {
		ps[i] = binary.LittleEndian.Uint32(d[4*i:]) & mask
	}
	return ps
}

func (f filter) add(d digest) {
	for _, b := range f.probes(d) {
		f[b/64] |= 1 << (b % 64)
	}
}

func (f filter) maybeHas(d digest) bool {
	for _, b := range f.probes(d) {
		if f[b/64]&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}
