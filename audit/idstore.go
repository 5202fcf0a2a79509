package audit

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// idStore keeps the first use of every outcome id of the outcome
// partitions an audit has finished, on disk: outcome_ids compares an id
// with its first use on any partition, and holding every id in memory
// would make the audit's memory grow with the topics (about 60 bytes per
// outcome) instead of with its largest partition. It is a Pebble database
// in a temporary directory, without a WAL (nothing in it outlives the
// audit), removed by close.
type idStore struct {
	db  *pebble.DB
	dir string
	// seen is a Bloom filter of the stored ids, of a fixed size: almost
	// every id is new, and the filter answers that without asking Pebble.
	// Past tens of millions of ids it answers "maybe" more often, which
	// costs lookups, never a wrong answer.
	seen filter
}

// idFilterBits is the most idStore.seen takes: 8 MiB, four probes: about
// 0.5 % false positives at 5 million ids, 4 % at 10 million.
const idFilterBits = 1 << 26

// idFilterBitsFor is the size of idStore.seen for an audit of at most n
// outcomes (from the outcomes topic's offsets, which bound its ids): 16
// bits per id, about 0.25 % false positives when full, a power of two
// from 64 KiB up to idFilterBits. Every outcome looks its id up in the
// filter and every new id is added: a filter of the full 8 MiB for a few
// hundred thousand ids missed the caches at each, a fifth of the store's
// CPU (BenchmarkIDStore), where one sized for them stays in them.
func idFilterBitsFor(n int64) int {
	bits := 1 << 19
	for bits < idFilterBits && int64(bits) < 16*n {
		bits <<= 1
	}
	return bits
}

// idKey is id's key in the store: kind 0, then the id (the spills' state
// entries start with their kind, spillKeys and up).
func idKey(id digest) []byte {
	return append([]byte{0}, id[:]...)
}

// idStoreMem is what Pebble may hold in memory: its block cache and
// memtables (docs/memory.md#audit); the filter adds idFilterBits/8.
const idStoreMem = 8 << 20

// openIDStore creates the store in a new directory under parent ("" : the
// system's temporary directory, $TMPDIR), for at most ids outcome ids.
func openIDStore(parent string, ids int64) (*idStore, error) {
	dir, err := os.MkdirTemp(parent, "onceflight-audit-")
	if err != nil {
		return nil, fmt.Errorf("audit: temporary directory for outcome ids: %w", err)
	}
	po := &pebble.Options{
		DisableWAL:         true,
		CacheSize:          idStoreMem,
		MemTableSize:       idStoreMem / 2,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietPebble{},
		// The keys are digests, so every flushed table spans the whole
		// key space and each compaction rewrote all that was stored: a
		// tenth of the audit's CPU, for lookups the filters in front of
		// the store make rare. Flushed tables stay in L0 (one per ~4 MB
		// written: a few hundred for tens of millions of entries), each
		// with its own Bloom filter.
		DisableAutomaticCompactions: true,
		L0StopWritesThreshold:       1 << 20,
	}
	// Most lookups are of ids never seen before: filters answer them
	// without reading a block.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("audit: open outcome id store in %s: %w", dir, err)
	}
	return &idStore{db: db, dir: dir, seen: newFilter(idFilterBitsFor(ids))}, nil
}

// idSeenLen is an encoded idSeen: tuple digest, partition, offset.
const idSeenLen = len(digest{}) + 4 + 8

// get returns the first use of id, if a finished partition had it.
func (s *idStore) get(id digest) (idSeen, bool, error) {
	if !s.seen.maybeHas(id) {
		return idSeen{}, false, nil
	}
	v, closer, err := s.db.Get(idKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return idSeen{}, false, nil
	}
	if err != nil {
		return idSeen{}, false, fmt.Errorf("audit: outcome id store: %w", err)
	}
	defer closer.Close()
	if len(v) != idSeenLen {
		return idSeen{}, false, fmt.Errorf("audit: outcome id store: entry of %d bytes, want %d", len(v), idSeenLen)
	}
	var seen idSeen
	copy(seen.tuple[:], v)
	seen.at.p = int32(binary.BigEndian.Uint32(v[16:]))
	seen.at.off = int64(binary.BigEndian.Uint64(v[20:]))
	return seen, true, nil
}

// add stores the first uses of a finished partition's ids. An id already
// stored comes back with the same first use (get put it in ids).
//
// They go in key order: a partition's ids make a batch larger than half
// a memtable, which Pebble sorts itself and flushes as a table of its own
// (a flushable batch); its sort of a batch in map order was a sixth of
// the store's CPU (BenchmarkIDStore), of one in order a single pass.
func (s *idStore) add(ids map[digest]idSeen) error {
	if len(ids) == 0 {
		return nil
	}
	type entry struct {
		id   digest
		seen idSeen
	}
	es := make([]entry, 0, len(ids))
	ks := make([]sortKey, 0, len(ids))
	for id, seen := range ids {
		ks = append(ks, sortKey{binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:]), len(es)})
		es = append(es, entry{id, seen})
	}
	ks = sortKeys(ks)
	b := s.db.NewBatch()
	defer b.Close()
	var v [idSeenLen]byte
	for _, k := range ks {
		e := &es[k.i]
		copy(v[:], e.seen.tuple[:])
		binary.BigEndian.PutUint32(v[16:], uint32(e.seen.at.p))
		binary.BigEndian.PutUint64(v[20:], uint64(e.seen.at.off))
		if err := b.Set(idKey(e.id), v[:], nil); err != nil {
			return fmt.Errorf("audit: outcome id store: %w", err)
		}
		s.seen.add(e.id)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("audit: outcome id store: %w", err)
	}
	return nil
}

// sortKey is an id as two big-endian words (its key order), and the
// index of its entry.
type sortKey struct {
	hi, lo uint64
	i      int
}

// sortKeys returns ks in key order (sortKeysCounted).
func sortKeys(ks []sortKey) []sortKey {
	out, _ := sortKeysCounted(ks)
	return out
}

// maxInsertionBucket is the largest bucket sortKeysCounted orders by
// insertion; a larger one is sorted by comparison (O(n log n)).
const maxInsertionBucket = 32

// sortKeysCounted returns ks in key order, and how many of its buckets
// were too large to order by insertion. Ids are digests, uniformly
// spread: placed by the top bits of hi (a counting sort into about one
// bucket per id), they are in order but within a bucket, which an
// insertion sort then fixes. A comparison sort of a partition's ids cost
// as much as Pebble's own sort of the batch it saves. Ids that are not
// uniform (an outcome id is anyone's string, and ids chosen to share the
// digest's top bits can be searched for) would put many in one bucket,
// whose insertion sort is quadratic: a bucket of more than
// maxInsertionBucket is sorted by slices.SortFunc instead, so the sort
// stays O(n log n) whatever the ids (TestSortKeysCrafted).
func sortKeysCounted(ks []sortKey) ([]sortKey, int) {
	if len(ks) < 2 {
		return ks, 0
	}
	width := bits.Len(uint(len(ks)))
	shift := 64 - width
	starts := make([]int, 1<<width+1)
	for _, k := range ks {
		starts[k.hi>>shift+1]++
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	out := make([]sortKey, len(ks))
	for _, k := range ks {
		b := k.hi >> shift
		out[starts[b]] = k
		starts[b]++
	}
	// starts[b] is now where bucket b ends, and bucket b+1 begins.
	large, lo := 0, 0
	for _, hi := range starts[:1<<width] {
		switch n := hi - lo; {
		case n > maxInsertionBucket:
			large++
			slices.SortFunc(out[lo:hi], compareSortKeys)
		case n > 1:
			for i := lo + 1; i < hi; i++ {
				for j := i; j > lo && compareSortKeys(out[j], out[j-1]) < 0; j-- {
					out[j], out[j-1] = out[j-1], out[j]
				}
			}
		}
		lo = hi
	}
	return out, large
}

// compareSortKeys orders sort keys as their ids' bytes.
func compareSortKeys(x, y sortKey) int {
	return cmp.Or(cmp.Compare(x.hi, y.hi), cmp.Compare(x.lo, y.lo))
}

// close closes the store and removes its directory.
func (s *idStore) close() error {
	err := s.db.Close()
	if rerr := os.RemoveAll(s.dir); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("audit: close outcome id store: %w", err)
	}
	return nil
}

// quietPebble drops Pebble's informational logs, which would interleave
// with the report; errors reach the audit as errors.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("audit: outcome id store: "+format, args...))
}
