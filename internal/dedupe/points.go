package dedupe

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// pointIters are the iterators Lookup reuses. A Pebble iterator reads the
// store as it was when the iterator was made, and building one per lookup
// (NewIter, Close) and opening each level's table in it was a fifth of a
// lookup's CPU draining new keys (BENCHMARKS.md, round 9 (lookup)); a
// reused one also keeps the table it last read in each level open, and
// most tables of L0 span the whole key space.
//
// What a lookup must see is every write that returned before it began: the
// committer commits a batch, then the workers' later lookups rely on it
// (the overlay covers only what is staged but not yet committed). So an
// iterator is reused only while no write has returned since it was made:
// every write to Pebble goes through Store.guard, which counts it in writes
// after the write returned; an iterator is tagged with the count read
// before it was made (every write counted by then is in it), and a lookup
// takes it only if the count is still the same when the lookup begins. A
// draining executor writes every few milliseconds, so an iterator lives
// that long; between writes hundreds of lookups share a few.
//
// An open iterator pins the tables and memtables it reads: those
// compactions and flushes replace stay on disk and in memory until it is
// closed. Stale iterators are closed by the next lookup, and the pool is
// emptied at most pointIterIdle after an iterator was put back
// (dropIdlePointIters), so a store that stops writing and reading does not
// hold old files.
type pointIters struct {
	// writes counts the writes to Pebble that returned (Store.guard).
	writes atomic.Uint64
	// slots bounds the iterators in use at once to maxPointIters: a
	// lookup takes a slot before it takes an iterator and gives it back
	// with the iterator. Lookups run on entity goroutines, up to one per
	// entity with buffered commands (thousands in a backlog), and the
	// scheduler preempts them mid-lookup: without a bound each lookup
	// that began meanwhile found the pool empty and made an iterator of
	// its own. Draining 1 M repeats then held up to 2 052 open table
	// iterators (64 with the bound), each with its Go buffers and the
	// blocks it pinned (BENCHMARKS.md, "Round 16 (lead)").
	slots chan struct{}
	mu    sync.Mutex
	// free are the iterators not in use, oldest first: each tagged with
	// writes as read before it was made. Every one is stale once the
	// newest is.
	free []pointIter
	// idle empties free pointIterIdle after a lookup put one back: an
	// iterator must not pin old tables after the lookups stop. armed: idle
	// is set to fire (mu).
	idle  *time.Timer
	armed bool
}

type pointIter struct {
	it     *pebble.Iterator
	writes uint64
}

// maxPointIters bounds the iterators kept, and the iterators in use
// (slots): as many as lookups can make progress at once (about one per
// core, and some waiting on a read from disk) are reused; more would only
// pin more.
const maxPointIters = 8

// pointIterIdle is how long unused iterators are kept.
const pointIterIdle = time.Second

// wrote marks every iterator made before now stale. Store.guard calls it
// after each write.
func (p *pointIters) wrote() { p.writes.Add(1) }

// get returns an iterator that sees every write that returned before the
// call, and the tag put needs.
func (s *Store) getPointIter() (*pebble.Iterator, uint64, error) {
	p := &s.points
	p.slots <- struct{}{}
	w := p.writes.Load()
	var stale []pointIter
	p.mu.Lock()
	if n := len(p.free); n > 0 && p.free[n-1].writes == w {
		it := p.free[n-1].it
		p.free[n-1] = pointIter{}
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return it, w, nil
	} else if n > 0 {
		stale = append(stale, p.free...)
		clear(p.free)
		p.free = p.free[:0]
	}
	p.mu.Unlock()
	for _, pi := range stale {
		_ = pi.it.Close() // its error, if any, was the lookup's that used it
	}
	it, err := s.db.NewIter(&pointIterOptions)
	if err != nil {
		<-p.slots
		return nil, 0, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	return it, w, nil
}

// putPointIter gives back an iterator from getPointIter: kept for the
// next lookups if nothing was written since it was made, else closed.
func (s *Store) putPointIter(it *pebble.Iterator, w uint64) {
	p := &s.points
	defer func() { <-p.slots }()
	if it.Error() == nil && p.writes.Load() == w {
		p.mu.Lock()
		if len(p.free) < maxPointIters {
			p.free = append(p.free, pointIter{it: it, writes: w})
			if !p.armed {
				p.armed = true
				p.idle.Reset(pointIterIdle)
			}
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	_ = it.Close()
}

// dropPointIters closes the iterators not in use. The idle timer calls it
// (inside the store, so Close waits for it), and Close once no call is
// inside.
func (s *Store) dropPointIters() {
	p := &s.points
	p.mu.Lock()
	free := p.free
	p.free = nil
	p.armed = false
	p.mu.Unlock()
	for _, pi := range free {
		_ = pi.it.Close()
	}
}

// dropIdlePointIters is the idle timer's: it empties the pool unless the
// store is closing (Close empties it then).
func (s *Store) dropIdlePointIters() {
	if s.enter() != nil {
		return
	}
	defer s.leave()
	s.dropPointIters()
}
