package consumer

import (
	"context"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// Memory bounds (docs/memory.md). A command is in memory from the fetch
// that brings it to the transaction that commits its answer:
//
//   - fetched: held by franz-go ahead of the poll loop, at most
//     MaxConcurrentFetches responses of MaxFetchBytes (newClient);
//   - buffered: dispatched to its entity's queue or running;
//   - staged: answered, queued for the committer (and its records in the
//     overlay) until the transaction committed and Pebble applied it.
//
// The poll loop does not poll while buffered + staged is at MaxBuffered
// commands or MaxBufferedBytes bytes (waitRoom), and a worker does not
// stage an answer while the staged answers alone are at MaxBufferedBytes
// (waitStaged). Before this bound, answers piled up in front of a
// committer slower than the workers: ~5 KB per command of a backlog.
//
// Wait order, which is why none of these waits can deadlock:
//
//	poll loop  → waits for workers and committer (waitRoom; waitStaged
//	             for a repeat it answers itself: answerRepeat)
//	worker     → waits for the committer (waitStaged; an intent's done)
//	committer  → waits for nobody in the process: it takes c.mu, then p.mu
//	             (addPending, applied, settled) and never waits on a cond
//
// A worker blocked in waitStaged holds its entity's single flight, its
// claimed keys and its partition's in-flight count, but no execution slot
// and no lock; the committer drains staged answers and intents without
// any of those, and settles the bytes it applied or dropped, which wakes
// the first waiting worker; each that stages wakes the next (waitStaged),
// so the waiters a settle makes room for are woken, not all of them. The
// claims and intents of waiting workers are in the overlay meanwhile:
// docs/memory.md counts one intent per command running. An intent waiter
// (before an attempt) is queued behind staged answers and committed with
// them, never behind a waiting worker. The wait
// also ends when the committer has stopped, the pipeline stops or the
// partition is lost, so a shutdown or revocation never waits on room (the
// poll loop's wait too: stop begins when its context ends, beginStop).

// answerOverhead is what one staged record costs besides its data, result
// and error message: the Record's fields and their strings, the sealed
// copy's fixed part, the overlay entry and the outcome event's envelope.
// Measured from heap profiles of a noop backlog with 200-byte data
// (BENCHMARKS.md): ~35 MB live for 10 000 commands consumed and not
// committed, ~3.5 KB each.
const answerOverhead = 3 << 10

// answerSize estimates the memory a staged answer holds until it is
// applied: journal records are held twice (the Record and its sealed
// bytes), outcomes and copies once. 0 means nothing to publish.
func answerSize(emits []emit) int {
	n := 0
	for i := range emits {
		em := &emits[i]
		if em.journal != nil {
			n += 2*recordBytes(em.journal) + answerOverhead
		}
		if em.outcome != nil && em.outcome != em.journal {
			n += recordBytes(em.outcome) + answerOverhead
		}
		if em.deadletter != nil {
			n += kgoBytes(em.deadletter)
		}
		if em.forward != nil {
			n += kgoBytes(em.forward)
		}
	}
	return n
}

func recordBytes(r *schemas.Record) int {
	n := len(r.Data) + len(r.Result)
	if r.Error != nil {
		n += len(r.Error.Message)
	}
	return n
}

func kgoBytes(r *kgo.Record) int { return len(r.Key) + len(r.Value) + answerOverhead }

// waitStaged waits, p.mu held, until an answer of size bytes fits among
// the staged ones. One answer is always let through when nothing is
// staged, so an answer larger than the bound alone is not stuck.
func (p *pipeline) waitStaged(st *partState, size int) {
	if p.hasStagedRoom(st, size) {
		return
	}
	// context.AfterFunc runs its function on a goroutine of its own, and
	// stop does not wait for it: registering and stopping under p.mu is
	// safe.
	stop := context.AfterFunc(st.ctx, func() {
		p.mu.Lock()
		p.wakeMemory()
		p.mu.Unlock()
	})
	defer stop()
	if stagedWaitHook != nil {
		stagedWaitHook(false)
	}
	for !p.hasStagedRoom(st, size) {
		p.stagedRoom.Wait()
		if stagedWaitHook != nil {
			stagedWaitHook(true)
		}
	}
	// Woken by a settle (which wakes one) or by an end (which wakes all):
	// the next waiter may fit too; it checks under mu after this answer
	// is counted (stageLocked), so the chain stops where the room does. A
	// waiter woken that does not fit waits again; the settle of what is
	// staged (there is some, or it would fit) wakes the chain again.
	p.stagedRoom.Signal()
}

// stagedWaitHook, when set (tests only), is called with woken false by a
// worker that begins to wait for staged room, and true each time it is
// woken in that wait.
var stagedWaitHook func(woken bool)

// wakeMemory wakes every wait for memory (waitRoom, waitStaged), p.mu
// held: for an event that ends them all, or that may let the poll loop
// poll.
func (p *pipeline) wakeMemory() {
	p.room.Broadcast()
	p.stagedRoom.Broadcast()
}

func (p *pipeline) hasStagedRoom(st *partState, size int) bool {
	return size == 0 || p.mu.staged.n == 0 || p.mu.staged.bytes+size <= p.e.cfg.MaxBufferedBytes ||
		p.mu.stopping || st.ctx.Err() != nil || p.cm.stopped()
}

// settled takes answers the committer applied or dropped out of the
// staged counts and wakes whoever waits for room.
func (p *pipeline) settled(items []*stagedItem) {
	n, bytes := 0, 0
	for _, it := range items {
		if it.size > 0 {
			n++
			bytes += it.size
		}
	}
	if n == 0 {
		return
	}
	p.mu.Lock()
	p.mu.staged.n -= n
	p.mu.staged.bytes -= bytes
	p.room.Broadcast()    // the poll loop, if it waits
	p.stagedRoom.Signal() // the first worker waiting in waitStaged; it wakes the next
	p.mu.Unlock()
}

// memorySnapshot is what the memory gauges show.
type memorySnapshot struct {
	bufferedN, bufferedBytes int
	stagedN, stagedBytes     int
	overlay                  int
	skipped                  int
}

func (p *pipeline) memory() memorySnapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return memorySnapshot{p.mu.buffered, p.mu.bufBytes, p.mu.staged.n, p.mu.staged.bytes, p.mu.ov.entries(), p.mu.skipped}
}

// highWater keeps the largest values seen since the executor started
// (across clients), so that a test or an operator can check a bound held
// for a whole drain, not only at the moments the gauges were scraped.
type highWater struct {
	buffered, staged, total pairHW // total: buffered + staged, what MaxBuffered* bound
	overlay                 maxInt
	skipped                 maxInt // skip.go
}

type pairHW struct{ n, bytes maxInt }

func (h *pairHW) raise(n, bytes int) {
	h.n.raise(n)
	h.bytes.raise(bytes)
}

type maxInt struct{ v atomic.Int64 }

// raise is one atomic load when v is not a new maximum (the common case:
// it runs on every dispatch and stage).
func (m *maxInt) raise(v int) {
	for {
		cur := m.v.Load()
		if int64(v) <= cur || m.v.CompareAndSwap(cur, int64(v)) {
			return
		}
	}
}

func (m *maxInt) get() float64 { return float64(m.v.Load()) }
