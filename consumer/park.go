package consumer

import (
	"context"
	"slices"
	"time"
)

// Stepping aside for a system that is down (docs/connectors.md, "One slow
// system does not starve the others").
//
// A command waiting for its external system is a consumed command, held
// in memory and counted against MaxBuffered. When a system is down, its
// commands wait until it answers or their give_up_after passes — an hour
// by default — and once they filled MaxBuffered the poll loop waited, so
// every other system's commands behind them in the topic waited too: the
// bulkheads kept the slots of a healthy system free, but not the memory
// that brings its commands in.
//
// So a system keeps at most KeepWaiting commands waiting while its breaker
// is not closed (limit.Config.KeepWaiting; newSystem sets it). A new
// command that has sent nothing is told to step aside instead of waiting
// (limit.System.AcquireOrStepAside, decide's row stepped-aside): its
// worker puts its offset back in front of its entity's skipped offsets,
// with those of the entity's queued commands, lets their memory go, and
// leaves the entity parked, with no worker. Everything a hot entity's
// skipped commands rely on holds for it (skip.go): the entity's later
// commands are skipped behind it, the offsets stay tracked and unanswered
// so the partition's committed offset never passes them, and
// MaxSkippedPerPartition bounds them.
//
// The pipeline looks at the parked entities every parkTick: it brings back
// as many of each system's as the system has room for (limit.System.Room,
// less those brought back that have not finished a command yet), in the
// order they stepped aside, by starting their worker, which reads their
// commands again from Kafka (refill) and runs them as if consumed now.
// Entities of a partition that is lost or draining are brought back at
// once: their worker ends their queue (their offsets stay uncommitted and
// the next owner consumes them), so no later ownership's queue waits
// behind a queue nobody runs.

// parkTick is how often parked entities are looked at.
const parkTick = 50 * time.Millisecond

// parkedQueue is an entity parked on a system (pipeline.mu.parked); due
// is the deadline of the command that stepped aside (zero: none).
type parkedQueue struct {
	entity string
	q      *entityQueue
	due    time.Time
}

// parkLocked parks entity's queue q on sys after its command it stepped
// aside: it and the queue's items become skipped offsets in front of the
// queue's, and their memory goes (p.mu held). it counted as buffered and
// running; the caller ends it as running (endRunning).
func (p *pipeline) parkLocked(st *partState, entity string, q *entityQueue, it *item, sys *system) {
	p.unbuffer(st, it)
	p.mu.buffered--
	p.skipQueued(st, q, it.offset)
	q.aside.parked = sys
	if p.mu.parked == nil {
		p.mu.parked, p.mu.woken = map[*system][]parkedQueue{}, map[*system]int{}
	}
	pq := parkedQueue{entity: entity, q: q}
	if d := it.cmd.Deadline; d != nil {
		pq.due = *d
		if p.mu.parkDue.IsZero() || d.Before(p.mu.parkDue) {
			p.mu.parkDue = *d
		}
	}
	p.mu.parked[sys] = append(p.mu.parked[sys], pq)
	p.parkedN.Add(1)
	if !st.buf.parkWatched {
		// A lost partition is cancelled without p.mu: bring its parked
		// entities back as soon as it is, not a tick later.
		st.buf.parkWatched = true
		context.AfterFunc(st.ctx, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.unparkEnded()
		})
	}
	p.room.Broadcast()
	p.cond.Broadcast()
}

// skipQueued makes q's queued commands skipped offsets, in front of its
// skipped ones, after first (the offset of a command taken off q, or
// none), and lets their memory go (p.mu held).
func (p *pipeline) skipQueued(st *partState, q *entityQueue, first ...int64) {
	a := q.side()
	offs := make([]int64, 0, len(first)+len(q.items)+len(a.skipped))
	offs = append(offs, first...)
	for _, x := range q.items {
		offs = append(offs, x.offset)
		p.unbuffer(st, x)
	}
	p.mu.buffered -= len(q.items)
	clear(q.items)
	q.first[0] = nil
	q.items = q.first[:0]
	a.skipped = append(offs, a.skipped...)
	n := len(offs)
	st.buf.skipped += n
	p.mu.skipped += n
	p.e.m.hw.skipped.raise(p.mu.skipped)
	p.checkPause(st)
}

// shed lets the queued commands of entity go while its running command,
// of partition part, waits for a system that is down, and skips those
// dispatched until it ends (entityQueue.shedding): they cannot run before
// it, which may wait until its give_up_after (an hour by default), and
// held they counted against --max-buffered as much as the waiting command
// itself. They become skipped offsets, read again once it is answered
// (skip.go's refill).
func (p *pipeline) shed(entity string, part int32) {
	st := p.e.part(part)
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.mu.queues[entity]
	if q == nil || q.st != st {
		return
	}
	q.side().shedding = true
	if len(q.items) > 0 {
		p.skipQueued(st, q)
		p.room.Broadcast()
	}
}

// unparkLocked starts the worker of a parked entity (p.mu held); woken
// says it comes back for room at its system (counted in p.mu.woken until
// it has run a command), not because its partition ended.
func (p *pipeline) unparkLocked(pq parkedQueue, woken bool) {
	q := pq.q
	a := q.aside
	sys := a.parked
	a.parked = nil
	p.parkedN.Add(-1)
	if woken {
		a.woken = sys
		p.mu.woken[sys]++
	}
	p.workers.Add(1)
	p.startEntity(entityTask{pq.entity, q.st})
}

// wokenDone ends q's count as brought back for room (p.mu held): it ran a
// command, or its queue ended. While its system is up, the next parked
// entity comes back at once: a backlog of parked entities drains at the
// pace of reading them again, not one system's room per parkTick.
func (p *pipeline) wokenDone(q *entityQueue) {
	if q.aside == nil || q.aside.woken == nil {
		return
	}
	sys := q.aside.woken
	p.mu.woken[sys]--
	q.aside.woken = nil
	if !sys.Down() {
		p.wake(sys, 1)
	}
}

// wake brings back up to n of sys's parked entities, in the order they
// parked (p.mu held).
func (p *pipeline) wake(sys *system, n int) {
	l := p.mu.parked[sys]
	n = min(n, len(l))
	if n <= 0 || p.mu.stopping {
		return
	}
	for _, pq := range l[:n] {
		p.unparkLocked(pq, true)
	}
	clear(l[:n])
	p.setParked(sys, slices.Clip(l[n:]))
}

// unparkEnded brings back every parked entity whose partition is lost or
// draining (p.mu held): their workers end their queues. A pipeline that
// stops leaves them: it is dropped with its queues.
func (p *pipeline) unparkEnded() {
	if p.parkedN.Load() == 0 || p.mu.stopping {
		return // stopping: stop waits for workers, none is started now
	}
	p.unparkWhere(func(pq parkedQueue) bool { return pq.q.st.lost.Load() || pq.q.st.draining.Load() })
}

// unparkWhere brings back, whatever their system's room, the parked
// entities for which back reports true (p.mu held).
func (p *pipeline) unparkWhere(back func(parkedQueue) bool) {
	for sys, l := range p.mu.parked {
		kept := l[:0]
		for _, pq := range l {
			if back(pq) {
				p.unparkLocked(pq, false)
				continue
			}
			kept = append(kept, pq)
		}
		clear(l[len(kept):])
		p.setParked(sys, kept)
	}
}

// setParked sets sys's parked list (p.mu held).
func (p *pipeline) setParked(sys *system, l []parkedQueue) {
	if len(l) == 0 {
		delete(p.mu.parked, sys)
		return
	}
	p.mu.parked[sys] = l
}

// unparkTick brings parked entities back where their system has room, and
// those of partitions that ended.
func (p *pipeline) unparkTick() {
	if p.parkedN.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.stopping {
		return
	}
	p.unparkEnded()
	p.unparkDue(time.Now())
	for sys := range p.mu.parked {
		p.wake(sys, sys.Room()-p.mu.woken[sys])
	}
}

// unparkDue brings back every parked entity whose first command's
// deadline has passed (p.mu held), whatever its system's room: read
// again, the command is answered expired (decide's row expired), as it
// was at its deadline when it waited for the system. Parked, it was read
// again only once the system had room — with KeepWaiting commands
// waiting for it, not before their give_up_after (an hour by default) —
// and nobody was told it had expired
// (TestSteppedAsideCommandExpiresAtItsDeadline). The entity's next
// command may step aside again.
func (p *pipeline) unparkDue(now time.Time) {
	if p.mu.parkDue.IsZero() || now.Before(p.mu.parkDue) {
		return
	}
	var next time.Time
	p.unparkWhere(func(pq parkedQueue) bool {
		if pq.due.IsZero() {
			return false
		}
		if !now.Before(pq.due) {
			return true
		}
		if next.IsZero() || pq.due.Before(next) {
			next = pq.due
		}
		return false
	})
	p.mu.parkDue = next
}
