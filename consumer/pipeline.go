package consumer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/decide"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// pipeline is the processing of one client's lifetime (one group member
// incarnation). Its shape is what makes G1 and G4 hold without a barrier
// between polls:
//
//   - the poll loop decodes and dispatches each command to its entity's
//     queue; an entity has at most one worker goroutine, which runs the
//     entity's commands strictly in partition order (single flight), while
//     other entities run concurrently under MaxInflight. A slow entity
//     delays only itself. A plain repeat of an entity with no queue is
//     answered by the poll loop itself, as the worker would
//     (answerRepeat).
//   - a finished command's answer (journal record, outcome, ...) is staged
//     with its offset; the committer publishes staged answers in a
//     transaction that also commits, under the group generation (KIP-447),
//     each partition's low watermark: the offset below which every command
//     is answered. Finished commands above the watermark are answered again
//     from the dedupe index if they are consumed again.
//   - before each connector attempt its intent is committed the same way,
//     so an attempt leaves the process only once a later owner is sure to
//     read it (see committer).
type pipeline struct {
	e  *Executor
	cl *kgo.Client
	cm *committer

	// mu guards the entity queues, the memory counts and the overlay: the
	// poll loop, the entity workers and the committer take it. Lock
	// order: DESIGN.md#lock-order.
	mu struct {
		sync.Mutex
		queues   map[string]*entityQueue // entities with a worker
		buffered int                     // dispatched, not yet staged or dropped
		bufBytes int                     // their record bytes
		// staged counts answers handed to the committer and not yet
		// applied (or dropped as fenced); with buffered it is what
		// MaxBuffered and MaxBufferedBytes bound (memory.go).
		staged  struct{ n, bytes int }
		ov      overlay // staged records, versions and claims (overlay.go)
		skipped int     // commands of hot entities read past (skip.go)
		// parked lists, per system, the entities parked on it in the
		// order they stepped aside; woken counts those brought back for
		// room that have not run a command yet (park.go).
		parked map[*system][]parkedQueue
		woken  map[*system]int
		// parkDue is the earliest deadline of a parked entity's first
		// command (zero: none has one): unparkTick brings it back then,
		// to be answered expired (park.go).
		parkDue  time.Time
		stopping bool // stop began: no new command starts
		// later queues, per entity, the commands polled under a later
		// ownership of its partition while the entity's worker still runs
		// a command of an ownership that ended (a lost session's execution
		// outlasting the rejoin and restore, a revoke's drain that timed
		// out), one queue per ownership in order. The worker drops its
		// queue, then runs these, each under its ownership (endQueue,
		// runEntity): appended to its queue, they were dropped with it,
		// and the later ownership, which had tracked their offsets, kept
		// its watermark below them with nobody to answer them
		// (TestCommandQueuedBehindEndedOwnershipIsAnswered). They run
		// after the old worker's command: single flight holds in the
		// process. Kept out of entityQueue, which a field more would move
		// to a larger size class for every entity's queue.
		later map[string][]*entityQueue
	}
	// cond, on mu, wakes drainPartition when a worker finishes a command
	// (and every wait when the pipeline stops).
	cond *sync.Cond
	// room, on mu, wakes the poll loop's wait for memory (waitRoom): it
	// is signalled only when buffered + staged shrinks, not on every
	// staged answer, so a poll loop held at the bound is not woken per
	// command.
	room *sync.Cond
	// stagedRoom, on mu, wakes the workers waiting in waitStaged one at a
	// time when the committer settles answers: each that stages wakes the
	// next, so a settle wakes as many as fit rather than all of them
	// (memory.go). With --max-buffered 4096 up to thousands of workers
	// wait, and waking them all at every settle doubled the CPU per command
	// (BENCHMARKS.md, "Round 21 (lead)"). Every other event that ends the
	// wait (stop, a lost partition, the committer stopped) wakes all
	// (wakeMemory).
	stagedRoom *sync.Cond
	workers    sync.WaitGroup // the entity workers; stop waits for them
	// pool keeps goroutines whose stacks have grown to what a command
	// needs: a fresh goroutine per entity grew its stack from 8 KiB on
	// every command (runtime.copystack was ~10 % of a noop drain's CPU).
	// work hands an entity to an idle one; idle counts them (at most
	// maxIdleWorkers wait, the rest exit); retire ends one idle worker
	// (trimIdle); quit ends them when stop has waited for every entity.
	//
	// An entity that finds no idle worker waits in pending when a worker
	// started for an earlier one has not begun yet (startEntity): that
	// worker, and whichever worker finishes first, take it. A backlog of
	// repeats hands out ~500 entities per poll, far more than are idle,
	// and a goroutine started for each (and its stack grown, ~3 times)
	// was ~8 % of a repeat's CPU.
	pool struct {
		work    chan entityTask
		idle    atomic.Int32
		maxIdle int32 // idleWorkerCap of --max-inflight
		retire  chan struct{}
		quit    chan struct{}
		wg      sync.WaitGroup
		run     func(entityTask) // runEntity; tests count with their own
		spawn   func(func())     // the go statement; tests start workers when they choose
		// mu is a leaf (DESIGN.md#lock-order). Whenever pending is not
		// empty, starting is at least 1: a started goroutine that has not
		// yet called began, which takes the next one.
		mu struct {
			sync.Mutex
			pending  []entityTask // entities waiting for a worker, in order
			starting int          // workers started that have not begun
		}
	}
	// poll is dispatchPoll's scratch, reused from poll to poll (the poll
	// loop's only).
	poll struct {
		recs []polled
		keys []dedupe.PrefetchKey
		pfs  []dedupe.Prefetched
		// repeat is the command answerRepeat answers, while it does.
		repeat item
	}
	// broken is set when a command could not be answered while its
	// partition is still ours: no later fetch would bring it back, so the
	// client is recreated and consumption restarts from the watermark.
	broken chan error
	// parkedN counts the parked entities (park.go), read without mu by
	// unparkTick.
	parkedN atomic.Int64
}

// entityQueue is guarded by pipeline.mu. Its commands run in offset
// order: items first, then skipped (skip.go). Once skipped is not empty
// every new command of the entity is skipped too, so the order holds.
type entityQueue struct {
	items []*item
	// aside is what a queue that reads past commands keeps (skip.go,
	// park.go): nil for most, whose commands are all items.
	aside *queueAside
	// st is the partition ownership the queue's commands were polled
	// under, which its worker runs them under (set when the queue is
	// made, never changed: read under p.mu with the queue). The entity's commands
	// polled under a later ownership while this one's worker still runs
	// wait in pipeline.mu.later.
	st *partState
	// first backs items for an entity's first queued command: most
	// entities of a backlog have one at a time, and their queue needs
	// no slice of its own (dispatch).
	first [1]*item
}

// queueAside is the part of an entity's queue that only reading past its
// commands needs: kept beside it, so that the queue of an entity with one
// command (most of a backlog's) stays within its size class.
type queueAside struct {
	skipped []int64 // offsets of commands read past, not held (skip.go)
	// parked is the system the entity's queue waits for with no worker
	// (park.go), nil when it is not parked; woken is the system it was
	// brought back for, until it has run a command.
	parked, woken *system
	// shedding: the running command waits for a system that is down, and
	// the entity's commands dispatched meanwhile are skipped
	// (pipeline.shed); cleared when the worker takes its next command.
	shedding bool
}

// side is q's aside, made when first needed (p.mu held).
func (q *entityQueue) side() *queueAside {
	if q.aside == nil {
		q.aside = &queueAside{}
	}
	return q.aside
}

// nSkipped is how many of q's commands are skipped (p.mu held).
func (q *entityQueue) nSkipped() int {
	if q.aside == nil {
		return 0
	}
	return len(q.aside.skipped)
}

// newEntityQueue is an empty queue of commands polled under st.
func newEntityQueue(st *partState) *entityQueue {
	q := &entityQueue{st: st}
	q.items = q.first[:0]
	return q
}

func newPipeline(e *Executor, cl *kgo.Client) *pipeline {
	p := &pipeline{
		e: e, cl: cl,
		broken: make(chan error, 1),
	}
	p.mu.queues, p.mu.ov = map[string]*entityQueue{}, newOverlay()
	p.pool.work, p.pool.retire, p.pool.quit = make(chan entityTask), make(chan struct{}), make(chan struct{})
	p.pool.maxIdle = idleWorkerCap(e.cfg.MaxInflight)
	p.pool.run = func(t entityTask) { p.runEntity(t.entity, t.st) }
	p.pool.spawn = func(f func()) { go f() }
	p.cond = sync.NewCond(&p.mu.Mutex)
	p.room = sync.NewCond(&p.mu.Mutex)
	p.stagedRoom = sync.NewCond(&p.mu.Mutex)
	p.cm = newCommitter(e, cl, p)
	return p
}

// polled is one record of a poll, decoded ahead of its dispatch when it
// is a command of a partition this process owns (dispatchPoll).
type polled struct {
	r *kgo.Record
	// st is the partition's state when the record was polled, nil if
	// this process did not own it then. The record belongs to that
	// ownership only (dispatch).
	st      *partState
	decoded bool
	cmd     schemas.Command
	err     error // the decode's
	want    int32 // the partition of cmd's entity (err nil)
	pf      int   // its index in the poll's prefetched records, or -1
}

// decode decodes pr's command and the partition of its entity, once:
// by dispatchPoll ahead of dispatch for the records it reads ahead, else
// by dispatch.
func (pr *polled) decode(e *Executor) {
	pr.decoded = true
	pr.cmd, pr.err = schemas.DecodeCommand(pr.r, e.cfg.MaxDataBytes)
	if pr.err == nil {
		pr.want = partitioner.ForEntity(pr.cmd.Subject, e.nPart)
	}
}

// dispatchPoll dispatches a poll's records in order (dispatch), after
// reading ahead, in one pass in key order, the records of the commands it
// will hand to entity workers (dedupe.Store.Prefetch): a worker's lookup
// of its command's key then answers from what was read, if no write of
// the key returned since (LookupPrefetched), instead of a seek of its own
// on the entity's goroutine (BENCHMARKS.md, "Round 17 (repeats2)").
// Decoding is all dispatch did before it could know a command's entity
// and key; it has no effect, so doing it first changes nothing else.
func (p *pipeline) dispatchPoll(fetches kgo.Fetches) {
	e := p.e
	recs, keys := p.poll.recs[:0], p.poll.keys[:0]
	halted := e.halted.Load() != nil
	// A poll's records come partition by partition: each run's state is
	// looked up once (e.part takes Executor.mu), when the run is polled.
	var st *partState
	last := int32(-1)
	fetches.EachRecord(func(r *kgo.Record) {
		if r.Partition != last {
			st, last = e.part(r.Partition), r.Partition
		}
		pr := polled{r: r, st: st, pf: -1}
		if !halted && !r.Attrs.IsControl() && st != nil && !st.lost.Load() && !st.draining.Load() {
			pr.decode(e)
			if pr.err == nil {
				if pr.want == r.Partition {
					pr.pf = len(keys)
					keys = append(keys, dedupe.PrefetchKey{Entity: pr.cmd.Subject, Key: pr.cmd.IdempotencyKey})
				}
			}
		}
		recs = append(recs, pr)
	})
	pfs := slices.Grow(p.poll.pfs[:0], len(keys))[:len(keys)]
	e.store.Prefetch(keys, pfs)
	if pollHook != nil {
		rs := make([]*kgo.Record, len(recs))
		for i := range recs {
			rs[i] = recs[i].r
		}
		pollHook(rs)
	}
	for i := range recs {
		var pf *dedupe.Prefetched
		if recs[i].pf >= 0 {
			pf = &pfs[recs[i].pf]
		}
		p.dispatch(&recs[i], pf)
	}
	// Nothing of this poll is kept past it: the items copied what they use.
	clear(recs)
	clear(keys)
	clear(pfs)
	p.poll.recs, p.poll.keys, p.poll.pfs = recs[:0], keys[:0], pfs[:0]
}

// pollHook, if set (tests), is called with each poll's records after they
// are read ahead and before the first is dispatched.
var pollHook func(recs []*kgo.Record)

// dispatch routes one polled record. Records of partitions this process
// does not own (not restored, draining, lost) are dropped: their offsets
// stay uncommitted and the owner consumes them. So is a record polled
// under an ownership that has ended since, even if the partition has been
// assigned to this process again and restored meanwhile (a poll's
// dispatch may wait for staged room while the group rebalances twice):
// the new ownership fetches from its committed offset, and would take the
// stale record's offset for its first (partState.track), hiding the
// offsets below it from its watermark. Whatever ends an ownership or
// replaces its state (release, dropAll, onAssigned) marks it lost first.
// pf, if not nil, is its command's record read ahead (dispatchPoll).
func (p *pipeline) dispatch(pr *polled, pf *dedupe.Prefetched) {
	e := p.e
	r := pr.r
	if e.halted.Load() != nil {
		return // not tracked: its offset is never committed past
	}
	st := pr.st
	if st == nil || st.lost.Load() || st.draining.Load() {
		return
	}
	if !st.track(r.Offset) {
		return // consumed again after a rewind: already tracked
	}
	if r.Attrs.IsControl() {
		// A transaction marker (KeepControlRecords): nothing to answer,
		// and the watermark may pass it.
		st.markStaged(r.Offset)
		return
	}
	if !pr.decoded {
		pr.decode(e)
	}
	cmd, err := pr.cmd, pr.err
	in := decide.RouteInput{DecodeErr: err, Partition: r.Partition}
	if err == nil {
		in.Want = pr.want
	}
	d := decide.Route(in)
	if d.Verdict != decide.Dispatch {
		// Answered here: its answer holds the record until staged and
		// committed (detached).
		r = detached(r)
	}
	var fwd *kgo.Record
	if d.Verdict == decide.BuildCopy {
		fwd, in.CopyErr = e.obTopics.ForwardCopy(r, cmd.Subject, in.Want)
		in.CopyKnown = true
		d = decide.Route(in)
	}
	if d.Verdict != decide.Dispatch {
		// Answered here, with no record of its key read: never executed
		// where it landed (docs/guarantees.md#decision-table, routing).
		j := &job{p: p, e: e}
		switch d.Verdict {
		case decide.Deadletter:
			j.undecodable(r, err, d)
		case decide.Reject:
			j.tooLargeToForward(r, cmd, d)
		case decide.Forward:
			e.m.forwarded.Inc()
			j.add(emit{forward: r, fwdCopy: fwd, entity: cmd.Subject, to: in.Want})
		default:
			j.fail(fmt.Errorf("routing decision %q (row %s) has no handler", d.Verdict, d.Row))
		}
		p.addBuffered(1)
		p.stage(st, r.Offset, j)
		return
	}
	if pf != nil && pf.Found() && e.tracer == nil && p.answerRepeat(st, r, cmd, pf) {
		return
	}
	p.mu.Lock()
	q, running := p.mu.queues[cmd.Subject]
	if !running {
		q = newEntityQueue(st)
		p.mu.queues[cmd.Subject] = q
	}
	if q.st != st {
		// The entity's worker runs a command of an ownership that ended
		// (st replaced it): queue behind it, under st (pipeline.mu.later).
		q = p.laterQueue(cmd.Subject, st)
	}
	if a := q.aside; a != nil && (len(a.skipped) > 0 || a.shedding) || len(q.items) >= e.cfg.MaxBufferedPerEntity {
		// A hot entity: read past its command (skip.go). Its offset stays
		// tracked and unanswered, so the watermark stays below it.
		p.skip(st, q, r.Offset)
		p.mu.Unlock()
		return
	}
	p.mu.buffered++
	it := newItem(r, cmd)
	if pf != nil {
		it.pf = *pf
	}
	p.enqueue(st, q, it)
	p.checkPause(st)
	if !running {
		p.workers.Add(1)
		p.startEntity(entityTask{cmd.Subject, st})
	}
	p.mu.Unlock()
}

// detached is a copy of r that shares nothing with the fetch response r
// was decoded from: a fetched record is an element of its batch's slab,
// and its key, value and header values are slices of the response (up to
// --max-fetch-bytes). A command the poll loop answers itself (deadletter,
// forward) is staged with its record until its transaction commits — and
// for as long as the brokers refuse transactions — and each such answer
// held its whole response, which the staged bound does not count
// (TestRoutedAnswerDoesNotPinFetchResponse). One copy per routed
// command, a path no plain command takes.
func detached(r *kgo.Record) *kgo.Record {
	c := *r
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	clone := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		buf = append(buf, b...)
		return buf[len(buf)-len(b) : len(buf) : len(buf)]
	}
	c.Key, c.Value = clone(r.Key), clone(r.Value)
	if r.Headers != nil {
		c.Headers = make([]kgo.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: clone(h.Value)}
		}
	}
	return &c
}

// answerRepeat answers, on the poll loop, a command r (decoded as cmd)
// whose key's record was read ahead (pf) and whose entity has nothing
// queued or running in this executor, when it is a plain repeat
// (job.repeat): no job queued for the entity's worker, no worker started
// or woken, for the command that costs least (BENCHMARKS.md, "Round 21
// (repeats5)"). It does what the entity's worker would: the command is
// buffered and counts as running from the moment it is taken (a drain
// waits for it), the entity's state is read unless the overlay knows it,
// and the answer is staged as the worker stages it (finish), with the
// same wait for room among the staged answers (the poll loop waits for
// the committer: allowed by memory.go's wait order). The entity has no
// queue meanwhile, and only the poll loop makes one: its next command is
// dispatched after this one is staged, so the entity's answers keep their
// order.
//
// It reports false, having answered nothing, for anything else — the
// entity busy, the pipeline stopping, the partition draining or lost,
// another key in flight for the entity, a record that is not a plain
// repeat's (job.repeat), an error — and the command goes to its entity's
// worker as before. Traced commands always do (tracing.go's spans are the
// worker's).
func (p *pipeline) answerRepeat(st *partState, r *kgo.Record, cmd schemas.Command, pf *dedupe.Prefetched) bool {
	ent := cmd.Subject
	p.mu.Lock()
	if _, busy := p.mu.queues[ent]; busy || p.mu.stopping || st.lost.Load() || st.draining.Load() {
		p.mu.Unlock()
		return false
	}
	it := &p.poll.repeat
	*it = item{partition: r.Partition, offset: r.Offset, cmd: cmd, size: len(r.Value) + len(r.Key), pf: *pf}
	version, known := p.mu.ov.version(ent, st)
	p.mu.buffered++
	p.buffer(st, it)
	st.buf.inflight++
	p.mu.Unlock()
	version, inFlight, err := p.entityState(ent, version, known)
	if err != nil {
		p.unrun(st, it)
		return false
	}
	j := newJob(p, inFlight)
	if (inFlight != "" && inFlight != cmd.IdempotencyKey) || !j.repeat(st.ctx, it, version) {
		p.unrun(st, it)
		return false
	}
	if repeatHook != nil {
		repeatHook(ent)
	}
	p.finish(st, ent, it, j, version)
	*it = item{}
	return true
}

// unrun takes back what answerRepeat counted for it, which it did not
// answer: the command goes to its entity's worker.
func (p *pipeline) unrun(st *partState, it *item) {
	p.mu.Lock()
	p.mu.buffered--
	p.unbuffer(st, it)
	st.buf.inflight--
	p.cond.Broadcast()
	p.room.Broadcast()
	p.mu.Unlock()
	*it = item{}
}

// repeatHook, when set (tests only), is called by the poll loop for each
// repeat it answers itself (answerRepeat), before it stages the answer.
var repeatHook func(entity string)

// entityTask is an entity whose queue needs a worker.
type entityTask struct {
	entity string
	st     *partState
}

// maxIdleWorkers bounds the goroutines kept waiting for an entity. A
// drain keeps several hundred entities' workers alive at once (most of
// them waiting for their external system's slots), and every poll hands
// up to MaxPollRecords commands to entities that have none: with 64 kept,
// most commands started a new goroutine and grew its stack (newproc and
// copystack, ~6 % of serve's CPU draining new keys, ~9 % draining
// repeats). Past a burst they are few again within keepIdleAfter
// (trimIdle): idle workers beyond keepIdleWorkers hold idleStackHold-sized
// stacks (16 KiB each) for nothing.
const (
	maxIdleWorkers  = 1024
	keepIdleWorkers = 64
	keepIdleAfter   = 5 * time.Second
)

// idleWorkerCap is how many workers may wait idle with maxInflight
// executions per system: twice that, within [keepIdleWorkers,
// maxIdleWorkers]. Idle stacks count in the garbage collector's heap goal,
// so 1 024 of them at the default 64 in flight held ~16 MB (twice, with
// GOGC's headroom) for goroutine starts that twice the slots already
// save (round 8 (mem): 151 against 157–162 MB peak RSS draining 200 000
// noop commands, CPU per command within noise).
func idleWorkerCap(maxInflight int) int32 {
	return int32(min(max(2*maxInflight, keepIdleWorkers), maxIdleWorkers))
}

// trimIdle ends idle workers beyond keepIdleWorkers (the poll loop's
// watcher calls it every keepIdleAfter) and returns how many it ended.
func (p *pipeline) trimIdle() (retired int) {
	// Counted once: a retired worker leaves the count only when it wakes.
	for n := p.pool.idle.Load() - keepIdleWorkers; n > 0; n-- {
		select {
		case p.pool.retire <- struct{}{}:
			retired++
		default:
			return retired // none waiting right now
		}
	}
	return retired
}

// startEntity runs t.entity's queue on an idle pooled goroutine; when none
// is idle, it waits in pending for a goroutine started before that has
// not begun, or for a new one. A goroutine that has not begun is blocked
// on nothing, so an entity in pending waits no longer than one with a
// goroutine of its own would wait to be scheduled: never behind a worker
// busy with a slow execution.
func (p *pipeline) startEntity(t entityTask) {
	select {
	case p.pool.work <- t:
		return
	default:
	}
	p.pool.mu.Lock()
	if p.pool.mu.starting > 0 {
		p.pool.mu.pending = append(p.pool.mu.pending, t)
		p.pool.mu.Unlock()
		return
	}
	p.pool.mu.starting++
	p.pool.mu.Unlock()
	p.spawn(t)
}

// spawn starts a worker for t, counted in pool.mu.starting by the caller.
func (p *pipeline) spawn(t entityTask) {
	p.pool.wg.Add(1)
	p.pool.spawn(func() { p.worker(t) })
}

// began is a new worker's first step: it is no longer starting, so if
// entities are pending, the next one gets a goroutine that is (the
// invariant of pool.mu).
func (p *pipeline) began() {
	p.pool.mu.Lock()
	p.pool.mu.starting--
	t, ok := p.popPending()
	if ok {
		p.pool.mu.starting++
	}
	p.pool.mu.Unlock()
	if ok {
		p.spawn(t)
	}
}

// nextPending takes the first pending entity, if any.
func (p *pipeline) nextPending() (entityTask, bool) {
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	return p.popPending()
}

// popPending removes the first pending entity (pool.mu held).
func (p *pipeline) popPending() (entityTask, bool) {
	q := p.pool.mu.pending
	if len(q) == 0 {
		return entityTask{}, false
	}
	t := q[0]
	q[0] = entityTask{}
	if p.pool.mu.pending = q[1:]; len(p.pool.mu.pending) == 0 {
		p.pool.mu.pending = nil
	}
	return t, true
}

// worker runs entity queues one after another — its own, then pending
// ones — then waits (if fewer than pool.maxIdle do) for the next one
// until the pipeline stops.
func (p *pipeline) worker(t entityTask) {
	defer p.pool.wg.Done()
	p.began()
	growStack()
	for {
		p.pool.run(t)
		if next, ok := p.nextPending(); ok {
			t = next
			continue
		}
		if p.pool.idle.Add(1) > p.pool.maxIdle {
			p.pool.idle.Add(-1)
			return
		}
		var ok bool
		if t, ok = p.idle(); !ok {
			return
		}
	}
}

// idleStackHold is stack an idle worker keeps in use while it waits. The
// garbage collector halves the stack of a goroutine that uses less than a
// quarter of it, at every cycle: an idle worker waiting in a small frame
// went back to a few KiB, and its next command grew it again, copying it
// (runtime.copystack, ~4 % of serve's CPU draining new keys). With this
// much in use, a 16 KiB stack — what the lookup, the job and staging need
// (Pebble's iterator setup alone is ~3 KiB of frame) — is kept; only more
// than that is given back.
const idleStackHold = 5 << 10

// idle waits for the next entity (ok false: the pipeline stops) with
// idleStackHold bytes of its frame in use. Not inlined, so that the frame
// is there while it waits.
//
//go:noinline
func (p *pipeline) idle() (t entityTask, ok bool) {
	var hold [idleStackHold]byte
	select {
	case t = <-p.pool.work:
		ok = true
	case <-p.pool.retire:
	case <-p.pool.quit:
	}
	p.pool.idle.Add(-1)
	holdStack(&hold)
	return t, ok
}

// holdStack keeps its argument, a local of the caller, alive on the
// caller's frame without letting it escape to the heap.
//
//go:noinline
func holdStack(*[idleStackHold]byte) {}

// workerStackFrame is the frame growStack takes: more than half of the
// 16 KiB stack a command needs, so that a new goroutine's stack grows to
// 16 KiB at once. The deepest frames of a new key's command are its
// lookup's iterator setup: worker → runEntity → job.handle → lookup →
// Store.Lookup (~7.7 KiB of frames) → Pebble's NewIter (~5.5 KiB).
const workerStackFrame = 12 << 10

// growStack grows a new worker's stack to what a command needs, in one
// copy while the stack holds only the worker's own frame. A goroutine
// starts with the runtime's average stack (4–8 KiB here): without this,
// its first command grew the stack twice (in job.handle, then in
// dedupe's lookup), each copy walking every frame above it
// (runtime.copystack, ~6 % of serve's CPU draining new keys: most of a
// drain's commands start on a new worker, BENCHMARKS.md round 9
// (lookup)). The runtime sizes a growth to fit the frame that asked for
// it, so one copy suffices.
//
// The frame is reserved, not written: the array is declared in a branch
// never taken (growStackTouch is always false, but not a constant the
// compiler could fold), so the function's frame holds it while nothing
// zeroes it (zeroing 12 KiB of fresh stack was a third of this function's
// CPU).
//
//go:noinline
func growStack() {
	if growStackTouch {
		var frame [workerStackFrame]byte
		useStack(frame[:])
	}
}

// growStackTouch is never set; see growStack.
var growStackTouch = false

// useStack keeps its argument, a local of the caller, on the caller's
// frame (not optimized away, not escaping to the heap).
//
//go:noinline
func useStack([]byte) {}

// enqueue appends it to q and counts it as buffered, except in
// p.mu.buffered: the caller counted it there (p.mu held).
func (p *pipeline) enqueue(st *partState, q *entityQueue, it *item) {
	if p.e.tracer != nil && it.queued.IsZero() {
		it.queued = time.Now() // only traces read it: no clock read per command otherwise
	}
	q.items = append(q.items, it)
	p.buffer(st, it)
}

// buffer counts it in its partition's buffer and in the pipeline's bytes,
// except in p.mu.buffered: the caller counted it there (p.mu held).
func (p *pipeline) buffer(st *partState, it *item) {
	st.buf.n++
	st.buf.bytes += it.size
	p.mu.bufBytes += it.size
	p.e.m.hw.buffered.raise(p.mu.buffered, p.mu.bufBytes)
	p.e.m.hw.total.raise(p.mu.buffered+p.mu.staged.n, p.mu.bufBytes+p.mu.staged.bytes)
}

func (p *pipeline) addBuffered(n int) {
	p.mu.Lock()
	p.mu.buffered += n
	p.mu.Unlock()
}

// wakeOnDone wakes the pipeline's waiters when ctx ends, so a wait on
// p.cond can observe it; call the returned func when done waiting.
func (p *pipeline) wakeOnDone(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.wakeMemory()
		p.mu.Unlock()
	})
}

// waitRoom blocks the poll loop while the commands consumed and not yet
// committed — buffered for their entities or staged for the committer —
// are at MaxBuffered or MaxBufferedBytes. The committer drains what is
// staged on its own and workers drain what is buffered, so the wait ends
// (memory.go has the wait order).
func (p *pipeline) waitRoom(ctx context.Context) {
	p.mu.Lock()
	full := p.full()
	p.mu.Unlock()
	if !full {
		return // the common case: no AfterFunc to register and remove
	}
	defer p.wakeOnDone(ctx)()
	p.mu.Lock()
	for p.full() && ctx.Err() == nil {
		p.room.Wait()
	}
	p.mu.Unlock()
}

// full reports whether the poll loop must wait (p.mu held).
func (p *pipeline) full() bool {
	cfg := &p.e.cfg
	return p.mu.buffered+p.mu.staged.n >= cfg.MaxBuffered || p.mu.bufBytes+p.mu.staged.bytes >= cfg.MaxBufferedBytes
}

// runEntity is the single flight of one entity: it runs the entity's
// queued commands one at a time, in order, then exits. When its queue
// ends with a queue of a later ownership behind it (pipeline.mu.later),
// it goes on with that one, under that ownership.
func (p *pipeline) runEntity(entity string, st *partState) {
	defer p.workers.Done()
	for {
		ctx := st.ctx
		p.mu.Lock()
		q := p.mu.queues[entity]
		if len(q.items) == 0 && q.nSkipped() > 0 && !p.mu.stopping && !st.lost.Load() && !st.draining.Load() {
			p.mu.Unlock()
			if err := p.refill(ctx, entity, st); err != nil {
				next := p.dropRest(entity, st, nil)
				p.fail(st, entity, err)
				if st = next; st == nil {
					return
				}
			}
			continue
		}
		if len(q.items) == 0 || p.mu.stopping || st.lost.Load() || st.draining.Load() {
			// Commands left in the queue are not staged: their offsets
			// stay uncommitted and they are consumed again.
			p.mu.buffered -= len(q.items)
			for _, it := range q.items {
				p.unbuffer(st, it)
			}
			next := p.endQueue(entity, q, st)
			p.cond.Broadcast()
			p.room.Broadcast()
			p.mu.Unlock()
			if st = next; st == nil {
				return
			}
			continue
		}
		it := q.items[0]
		q.items[0] = nil
		q.items = q.items[1:]
		woken := false
		if a := q.aside; a != nil {
			a.shedding = false
			woken = a.woken != nil
		}
		version, ok := p.mu.ov.version(entity, st)
		// Running from the moment it leaves the queue (under the lock that
		// took it, which checked draining): a drain never sees a command
		// neither queued nor running.
		st.buf.inflight++
		p.mu.Unlock()
		version, inFlight, err := p.entityState(entity, version, ok)
		if err != nil {
			p.e.log.Error("entity state", "entity", entity, "err", err)
			p.endRunning(st, nil)
			if st = p.dropRest(entity, st, it); st == nil {
				return
			}
			continue
		}
		j := newJob(p, inFlight)
		j.safeHandle(ctx, it, &version)
		if woken {
			p.mu.Lock()
			p.wokenDone(q)
			p.mu.Unlock()
		}
		if j.steppedAside != nil && j.err == nil && len(j.emits) == 0 {
			p.mu.Lock()
			if !p.mu.stopping && !st.lost.Load() && !st.draining.Load() {
				p.parkLocked(st, entity, q, it, j.steppedAside)
				p.mu.Unlock()
				p.endRunning(st, j.claimed)
				return
			}
			p.mu.Unlock()
			// The partition ends (or the pipeline stops): the command is
			// not answered and is consumed again, as a queued one is.
			p.endRunning(st, j.claimed)
			if st = p.dropRest(entity, st, it); st == nil {
				return
			}
			continue
		}
		// The job counts as running, and its new keys stay claimed, until
		// its answer is staged: a drain must not flush before it, and a
		// reused key must see it in the overlay.
		if j.err != nil {
			p.endRunning(st, j.claimed)
			// Not staged: the partition keeps its watermark below this
			// command, and the entity's later commands must not run
			// before it (G1, order): drop them too.
			next := p.dropRest(entity, st, it)
			p.fail(st, entity, fmt.Errorf("offset %d: %w", it.offset, j.err))
			if st = next; st == nil {
				return
			}
			continue
		}
		p.finish(st, entity, it, j, version)
	}
}

// finish stages the answer of job j to entity's command it, which counted
// as running since it was taken (runEntity, answerRepeat), and ends it as
// running: the entity's version the job left, the command out of the
// buffer and its answer staged under one lock.
func (p *pipeline) finish(st *partState, entity string, it *item, j *job, version int64) {
	journaled := 0
	for _, em := range j.emits {
		if em.journal != nil {
			journaled++
		}
	}
	j.markFresh()
	size := answerSize(j.emits)
	p.mu.Lock()
	p.mu.ov.setVersion(entity, st, version, journaled)
	p.unbuffer(st, it)
	p.stageLocked(st, it.offset, j, size)
	p.endRunning(st, j.claimed)
}

// entityState is the entity's version and the key it has in flight for a
// command taken to run (runEntity, answerRepeat): the overlay's version
// and no key in flight when the overlay knows the entity (known: an
// earlier command of this ownership staged its records), else what the
// store has.
func (p *pipeline) entityState(entity string, version int64, known bool) (int64, string, error) {
	if known {
		return version, "", nil
	}
	if entityReadHook != nil {
		entityReadHook(entity)
	}
	es, _, err := p.e.store.Entity(entity)
	return es.Version, es.InFlightKey, err
}

// endRunning ends a command that counted as running on st since its
// worker took it off its queue: the keys its job claimed are released,
// and a drain waiting for st is woken.
func (p *pipeline) endRunning(st *partState, claimed []scopedKey) {
	p.mu.Lock()
	p.mu.ov.release(claimed)
	st.buf.inflight--
	p.cond.Broadcast()
	p.mu.Unlock()
}

// fail restarts consumption from the committed watermark after a command
// of a partition still ours could not be answered: no later fetch would
// bring it back.
func (p *pipeline) fail(st *partState, entity string, err error) {
	if st.lost.Load() || st.draining.Load() {
		return
	}
	p.e.log.Error("command could not be answered; restarting consumption from the committed watermark",
		"entity", entity, "partition", st.p, "err", err)
	select {
	case p.broken <- fmt.Errorf("partition %d: %w", st.p, err):
	default:
	}
}

// dropRest drops cur (not answered; nil for none) and the entity's queued
// and skipped commands; it returns what endQueue returns.
func (p *pipeline) dropRest(entity string, st *partState, cur *item) (next *partState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur != nil {
		p.unbuffer(st, cur)
		p.mu.buffered--
	}
	if q := p.mu.queues[entity]; q != nil {
		p.mu.buffered -= len(q.items)
		for _, it := range q.items {
			p.unbuffer(st, it)
		}
		next = p.endQueue(entity, q, st)
	}
	p.cond.Broadcast()
	p.room.Broadcast()
	return next
}

// endQueue removes an entity's (empty or abandoned) queue, forgetting its
// skipped commands: their offsets stay uncommitted and they are consumed
// again (p.mu held). The first queue of a later ownership waiting behind
// it (pipeline.mu.later) becomes the entity's queue: endQueue returns that
// ownership, whose commands the worker runs next, else nil.
func (p *pipeline) endQueue(entity string, q *entityQueue, st *partState) *partState {
	delete(p.mu.queues, entity)
	p.wokenDone(q)
	if n := q.nSkipped(); n > 0 {
		p.unskip(st, n)
		q.aside.skipped = nil
	}
	p.mu.ov.idle(entity)
	if len(p.mu.later) == 0 {
		return nil // the common case: no map lookup
	}
	l := p.mu.later[entity]
	if len(l) == 0 {
		return nil
	}
	next := l[0]
	if len(l) == 1 {
		delete(p.mu.later, entity)
	} else {
		p.mu.later[entity] = l[1:]
	}
	p.mu.queues[entity] = next
	return next.st
}

// laterQueue is the queue, behind the entity's running one, of its
// commands polled under st, a later ownership of its partition than the
// running queue's (pipeline.mu.later; p.mu held).
func (p *pipeline) laterQueue(entity string, st *partState) *entityQueue {
	l := p.mu.later[entity]
	if n := len(l); n > 0 && l[n-1].st == st {
		return l[n-1]
	}
	q := newEntityQueue(st)
	if p.mu.later == nil {
		p.mu.later = map[string][]*entityQueue{}
	}
	p.mu.later[entity] = append(l, q)
	return q
}

// unbuffer takes a command out of its partition's buffer counts (p.mu
// held).
func (p *pipeline) unbuffer(st *partState, it *item) {
	if it == nil || it.counted {
		return
	}
	it.counted = true
	st.buf.n--
	st.buf.bytes -= it.size
	p.mu.bufBytes -= it.size
	p.checkPause(st)
}

// checkPause pauses fetching a partition whose buffered commands reached a
// bound (count, bytes, or skipped commands remembered) and resumes it once
// it is down to half, so a full partition waits alone while the rest of
// the process keeps consuming (p.mu held). A hot entity alone does not
// pause its partition: its commands past its bound are skipped (skip.go).
//
// A partition that is no longer ours is left alone: its next assignment
// resumes it (onAssigned).
func (p *pipeline) checkPause(st *partState) {
	cfg := &p.e.cfg
	if st.lost.Load() {
		return
	}
	switch {
	case !st.buf.paused && (st.buf.n >= cfg.MaxBufferedPerPartition || st.buf.bytes >= cfg.MaxBufferedBytesPerPartition || st.buf.skipped >= cfg.MaxSkippedPerPartition):
		st.buf.paused = true
		p.cl.PauseFetchPartitions(map[string][]int32{cfg.Topics.Commands: {st.p}})
		p.e.log.Debug("partition paused: buffered commands at their bound", "partition", st.p, "buffered", st.buf.n, "bytes", st.buf.bytes, "skipped", st.buf.skipped)
	case st.buf.paused && st.buf.n <= cfg.MaxBufferedPerPartition/2 && st.buf.bytes <= cfg.MaxBufferedBytesPerPartition/2 && st.buf.skipped <= cfg.MaxSkippedPerPartition/2:
		st.buf.paused = false
		p.cl.ResumeFetchPartitions(map[string][]int32{cfg.Topics.Commands: {st.p}})
	}
}

// pausedCount is the number of owned partitions paused by their bounds.
func (p *pipeline) pausedCount() int { return len(p.pausedPartitions()) }

// stage hands a finished job to the committer and makes its records
// visible to later jobs before they are in Pebble. It first waits for
// room among the staged answers (waitStaged): this is the backpressure
// that keeps answers from piling up in front of a committer slower than
// the workers.
func (p *pipeline) stage(st *partState, off int64, j *job) {
	size := answerSize(j.emits)
	p.mu.Lock()
	p.stageLocked(st, off, j, size)
}

// stageLocked is stage for an answer of size bytes (answerSize), called
// with p.mu held, which it releases: a worker takes its command out of
// the buffer and stages its answer under one lock.
func (p *pipeline) stageLocked(st *partState, off int64, j *job, size int) {
	p.waitStaged(st, size)
	p.mu.buffered--
	if size > 0 {
		p.mu.staged.n++
		p.mu.staged.bytes += size
		p.e.m.hw.staged.raise(p.mu.staged.n, p.mu.staged.bytes)
		p.e.m.hw.total.raise(p.mu.buffered+p.mu.staged.n, p.mu.bufBytes+p.mu.staged.bytes)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	p.cm.stage(st, off, j.emits, size)
}

// addPending makes staged records visible to later commands' lookups
// (called by the committer once they are chained).
func (p *pipeline) addPending(st *partState, recs []*schemas.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.ov.stageRecords(st, recs)
	p.e.m.hw.overlay.raise(p.mu.ov.entries())
}

func (p *pipeline) pendingRecord(key scopedKey) (schemas.Record, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.ov.record(key, func(st *partState) bool { return !st.lost.Load() && p.e.part(st.p) == st })
}

// applied forgets overlay entries that Pebble now holds.
func (p *pipeline) applied(recs []journaled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.ov.applied(recs, func(entity string) bool { _, busy := p.mu.queues[entity]; return busy })
}

// forget drops the overlay entries of staged answers that will never be
// applied (their partition was lost).
func (p *pipeline) forget(items []*stagedItem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, it := range items {
		for i := range it.emits {
			if j := it.emits[i].journal; j != nil {
				p.mu.ov.forget(it.st, j, func(entity string) bool { _, busy := p.mu.queues[entity]; return busy })
			}
		}
	}
}

func (p *pipeline) claim(key scopedKey, fp string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := p.mu.ov.claim(key, fp)
	p.e.m.hw.overlay.raise(p.mu.ov.entries())
	return ok
}

// entityReadHook, when set (tests only), is called by a worker that has
// taken a command off its entity's queue, before it reads the entity's
// state from the store.
var entityReadHook func(entity string)

// drainPartition stops new work for st and waits until no worker runs one
// of its commands; their answers are staged by then.
func (p *pipeline) drainPartition(ctx context.Context, st *partState) error {
	st.draining.Store(true)
	defer p.wakeOnDone(ctx)()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unparkEnded()
	for st.buf.inflight > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("drain partition %d: %d commands still running: %w", st.p, st.buf.inflight, ctx.Err())
		}
		p.cond.Wait()
	}
	return nil
}

// beginStop stops starting commands and ends every wait for memory: the
// first step of stop, which consume also takes as soon as the poll loop's
// context ends. The poll loop itself may wait for staged room (a repeat it
// answers, a deadletter or forward it stages): with the brokers refusing
// every transaction nothing staged settles, and that wait, which ended on
// stopping but not on the poll context, kept the poll loop from returning
// to stop — Run never returned (TestShutdownEndsPollLoopWaitingForStagedRoom).
func (p *pipeline) beginStop() {
	p.mu.Lock()
	p.mu.stopping = true
	p.cond.Broadcast()
	p.wakeMemory()
	p.mu.Unlock()
}

// stop stops starting commands, waits for the running ones and flushes.
// The wait is bounded by ctx: past it, running commands are interrupted
// (their records stay in_progress and are inherited by the next owner) and
// whatever is staged is flushed; shutdown never hangs on a worker.
func (p *pipeline) stop(ctx context.Context) error {
	p.beginStop()
	done := make(chan struct{})
	go func() {
		p.workers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		p.e.log.Warn("shutdown: commands still running after the bound; interrupting them (the next owner inherits them)")
		for _, st := range p.e.ownedStates() {
			st.cancel()
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			// Returning now would leave workers running under a store
			// the caller is about to close: wait, and say what we wait for.
			p.e.log.Error("shutdown: commands still running 5s after they were interrupted (a connector that ignores its context?); waiting for them")
			<-done
		}
	}
	// Every entity has ended: the pooled goroutines wait for nothing.
	close(p.pool.quit)
	p.pool.wg.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return p.cm.flushNow(fctx)
}
