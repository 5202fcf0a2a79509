package dedupe

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// presence is a Bloom filter of every record key the store holds or ever
// held (DESIGN.md#a-new-keys-lookup-the-presence-filter): a key it has never
// seen was never written, so Lookup answers "absent" without Pebble.
// Almost every lookup of a new key is a miss, and the Pebble seek that
// found nothing was ~20 % of the executor's CPU draining new keys
// (BENCHMARKS.md, round 12 (lookup)). "Maybe present" falls back to the
// seek, so a false positive costs only the seek the filter was meant to
// save.
//
// What makes "absent" true (G2):
//   - trusted only once complete: open starts a keys-only scan of r/ from
//     an iterator made before the store is returned (so before any write
//     of this Open), and lookups ignore the filter (seek as before) until
//     the scan has added every key it saw (ready). The scan's view plus
//     the adds of every write after it cover every stored key. A large
//     store thus starts at once (the scan was 1.2–1.6 µs of CPU per
//     stored key: ~15 s at 10 M keys) and gains the filter when it ends;
//   - every write of a record adds its key before the write is applied
//     (Batch.finish for Commit, CommitNoSync, CommitSyncLater and
//     CommitIngest), so a lookup that sees the write sees the key; Prune's
//     stub, the one other write of a record, rewrites a key it has just
//     read, which is in already. Pebble
//     publishes an applied batch with an atomic store and the bits are set
//     with atomic ORs before it (Go's atomics are sequentially
//     consistent). A write that fails leaves its key in: a false positive;
//   - nothing is ever removed: records pruned or deleted stay in as false
//     positives until the next Open.
//
// It grows as a scalable Bloom filter: generations of doubling capacity,
// each at presenceBitsPerKey (~1 % false positives when full); a key is
// added to the newest, and tested in all. Memory is capped
// (presenceMaxBytes): past the cap the newest generation takes every
// further key, and its false-positive rate rises towards 1, which costs
// seeks, never a wrong answer.
//
// Adds and tests are lock-free (atomic words): lookups run on every
// entity worker while the committer adds. mu serializes only growth.
type presence struct {
	seed maphash.Seed
	// gens are the generations, oldest first; replaced (copy on write)
	// under mu when one is added.
	gens     atomic.Pointer[[]*presenceGen]
	mu       sync.Mutex
	maxBytes int64 // cap of all generations' bits, in bytes
	bytes    int64 // allocated so far (mu)
	// ready: the scan of the keys stored at Open has added all of them;
	// until then "absent" from the filter means nothing. done is closed
	// when the scan ends, ready or not (failed, or stopped by Close).
	ready atomic.Bool
	done  chan struct{}
}

// presenceGen is one blocked Bloom filter: each key sets presenceProbes
// bits in one 512-bit block (a cache line), so a test reads one line.
type presenceGen struct {
	words    []atomic.Uint64 // blocks × 8
	blocks   uint64
	capacity int64
	added    atomic.Int64
}

const (
	// presenceBitsPerKey and presenceProbes: ~1 % false positives for a
	// full generation of 512-bit blocks, like the tables' filters
	// (bloomBitsPerKey).
	presenceBitsPerKey = 10
	presenceProbes     = 7
	// presenceFirstKeys is the first generation's capacity (1.25 MiB);
	// each next one doubles it.
	presenceFirstKeys = 1 << 20
	// presenceMaxBytes caps the filter's memory: 32 MiB, ~26 M keys at
	// ~1 % (generations of 1, 2, 4, 8 M keys take 18.75 MiB for 15 M).
	presenceMaxBytes = 32 << 20
)

func newPresence(maxBytes int64) *presence {
	p := &presence{seed: maphash.MakeSeed(), maxBytes: maxBytes, done: make(chan struct{})}
	p.grow(presenceFirstKeys)
	return p
}

// grow appends a generation for about keys keys, or as many as the cap
// leaves room for; at the cap, none (the newest takes every key).
// Called with mu held, or before p is shared.
func (p *presence) grow(keys int64) {
	bytes := keys * presenceBitsPerKey / 8
	bytes = min(bytes, p.maxBytes-p.bytes)
	blocks := uint64(bytes / 64)
	if blocks == 0 {
		if p.gens.Load() != nil {
			return
		}
		blocks = 1
	}
	g := &presenceGen{words: make([]atomic.Uint64, blocks*8), blocks: blocks, capacity: int64(blocks) * 512 / presenceBitsPerKey}
	p.bytes += int64(blocks) * 64
	var gens []*presenceGen
	if old := p.gens.Load(); old != nil {
		gens = append(gens, *old...)
	}
	gens = append(gens, g)
	p.gens.Store(&gens)
}

// add records the record key of scope sc (Batch.records' keys).
func (p *presence) add(sc string) { p.addHash(maphash.String(p.seed, sc)) }

// addBytes is add for a scope in bytes (maphash hashes a string and its
// bytes alike).
func (p *presence) addBytes(sc []byte) { p.addHash(maphash.Bytes(p.seed, sc)) }

func (p *presence) addHash(h uint64) {
	gens := *p.gens.Load()
	g := gens[len(gens)-1]
	g.set(h)
	if g.added.Add(1) == g.capacity {
		p.mu.Lock()
		if last := *p.gens.Load(); last[len(last)-1] == g {
			p.grow(2 * g.capacity)
		}
		p.mu.Unlock()
	}
}

// absent reports whether the scope sc is certainly not stored: the filter
// is complete (ready) and never saw it. False means "seek".
func (p *presence) absent(sc []byte) bool {
	return p.ready.Load() && !p.mayContain(sc)
}

// mayContain reports whether the scope sc may have been added; false means
// it never was.
func (p *presence) mayContain(sc []byte) bool {
	h := maphash.Bytes(p.seed, sc)
	for _, g := range *p.gens.Load() {
		if g.test(h) {
			return true
		}
	}
	return false
}

// block picks a generation's block from h's high half (a multiply-shift
// range reduction: any number of blocks); probe bits come from h mixed
// again, 9 bits (a bit of the block) each.
func (g *presenceGen) block(h uint64) []atomic.Uint64 {
	b := (h >> 32) * g.blocks >> 32
	return g.words[b*8 : b*8+8]
}

func probeBits(h uint64) uint64 { return h * 0x9E3779B97F4A7C15 }

func (g *presenceGen) set(h uint64) {
	blk := g.block(h)
	bits := probeBits(h)
	for range presenceProbes {
		bit := bits & 511
		blk[bit>>6].Or(1 << (bit & 63))
		bits >>= 9
	}
}

func (g *presenceGen) test(h uint64) bool {
	blk := g.block(h)
	bits := probeBits(h)
	for range presenceProbes {
		bit := bits & 511
		if blk[bit>>6].Load()&(1<<(bit&63)) == 0 {
			return false
		}
		bits >>= 9
	}
	return true
}

// sizeBytes is the memory of the filter's bits.
func (p *presence) sizeBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// presenceScanEvery is how many keys the scan reads between two looks at
// whether the store is closing: Close waits for the scan (it counts as a
// call inside the store), and 1 024 keys are ~1–2 ms of it.
const presenceScanEvery = 1024

// startPresence makes the store's presence filter and starts filling it
// with the record keys the store holds, in the background: a keys-only
// scan of r/ (values, in blob files, are not read) through an iterator
// made here, before open returns and so before any write of this Open;
// every later write adds its own keys (Batch.finish). Lookups seek as
// before until the scan has ended (presence.absent). hold, if not nil
// (tests), is waited for before the scan reads.
func (s *Store) startPresence(maxBytes int64, hold <-chan struct{}) error {
	p := newPresence(maxBytes)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: recordSpan.start, UpperBound: recordSpan.end})
	if err != nil {
		return fmt.Errorf("dedupe: new iterator: %w", err)
	}
	s.present = p
	// A call inside the store until it ends: Close waits for it, so the
	// iterator is closed before Pebble is.
	s.inside.Add(1)
	go func() {
		defer close(p.done)
		defer s.leave()
		if hold != nil {
			<-hold
		}
		s.scanPresence(p, it)
	}()
	return nil
}

// scanPresence adds every key it reads to p and marks p ready, or stops
// at Close. Damage it meets fails the store, as a read while running does
// (reportCorrupt): the next start rebuilds.
func (s *Store) scanPresence(p *presence, it *pebble.Iterator) {
	start := time.Now()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		p.addBytes(it.Key()[len(prefixRecord):])
		n++
		if n%presenceScanEvery == 0 && s.closed.Load() {
			_ = it.Close()
			return
		}
	}
	err := it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		err = s.reportCorrupt(err)
		s.log.Error("dedupe: presence filter scan failed; lookups keep seeking", "records", n, "err", err)
		return
	}
	p.ready.Store(true)
	s.log.Info("dedupe: presence filter ready", "records", n, "bytes", p.sizeBytes(), "took", time.Since(start).Round(time.Millisecond))
}
