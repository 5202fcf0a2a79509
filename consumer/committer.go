package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// committer is the only writer of Kafka transactions and of Pebble (outside
// restore). Each flush is one transaction holding
//
//   - the intents waiting to be recorded (in_progress, attempt, deadline,
//     fencing token),
//   - the staged answers of finished commands (final journal records,
//     outcome events, deadletters, forwards),
//   - epoch markers of partitions being restored, and
//   - a TxnOffsetCommit of the owned partitions' low watermarks that moved
//     since this ownership last committed them (and of a restoring
//     partition's committed offset), sent with the group generation and
//     member id (KIP-447); every owned partition's when none moved, so
//     that every transaction carries the fence.
//
// The offset commit is the fence: a process that is no longer a member of
// the current generation — a zombie after a pause, a restore that outlived
// its assignment — has it refused, aborts the transaction, and nothing it
// wrote becomes visible. An intent's waiter is released only after its
// transaction committed, so every connector attempt is preceded by a
// fenced, durable record that a later owner's restore will read.
// Pebble is updated after the commit, as a cache of what committed —
// except intents, which stay in the overlay until a later record of their
// key replaces them, while each partition's stored Progress stays before
// its oldest open intent (DESIGN.md, "An intent stays out of Pebble until
// its record is replaced").
type committer struct {
	e  *Executor
	cl *kgo.Client
	p  *pipeline

	// mu guards the queue, and every partState's chain (partstate.go).
	// Lock order: DESIGN.md#lock-order.
	mu struct {
		sync.Mutex
		queue []entry // intents, staged answers and markers, in journal order
	}
	wake    chan struct{}   // a send wakes the loop: something was queued
	flushes chan chan error // flushNow's requests, answered by the loop
	done    chan struct{}   // closed when the loop has returned

	// syncing is the last transaction's Pebble fsync, under way while the
	// loop goes on to the next transaction (loop only; nil when none):
	// see apply. syncFailed carries its error to the loop when it fails
	// with nothing else to wake the loop.
	syncing    *pendingSync
	syncFailed chan error

	// holding lists the partition ownerships with open intents (loop
	// only): once one ends, its intents leave the overlay (apply).
	holding map[*partState]bool

	// groupImplicit: the TxnOffsetCommit adds the group to the
	// transaction itself, no AddOffsetsToTxn first (loop only; see
	// commitOffsets).
	groupImplicit bool

	// landing is closed when the transaction under way has been committed
	// and applied to Pebble (or has failed); nil between transactions. A
	// reader outside the executor (the record API) waits for it before
	// every read (settled): the transaction's outcome events are visible
	// to consumers from the moment the broker commits it, one local write
	// before Pebble holds its records, and a client that reads an outcome
	// and then asks for its record must find it in that state — missing
	// is not the only way to be older (in_progress, unresolved, held all
	// change), so the wait is not limited to misses.
	//
	// ch is set and cleared only by the committer loop (flush, via land);
	// readers (the record API, any goroutine) only load it. The mutex is a
	// leaf: nothing else is locked while it is held (DESIGN.md#lock-order).
	landing struct {
		sync.Mutex
		ch chan struct{}
	}
}

// settled waits until the transaction under way, if any, has been applied
// to Pebble or has failed, or ctx ends.
func (c *committer) settled(ctx context.Context) error {
	c.landing.Lock()
	ch := c.landing.ch
	c.landing.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// land marks a transaction under way until the returned func is called.
func (c *committer) land() (landed func()) {
	ch := make(chan struct{})
	c.landing.Lock()
	c.landing.ch = ch
	c.landing.Unlock()
	return func() {
		c.landing.Lock()
		c.landing.ch = nil
		c.landing.Unlock()
		close(ch)
	}
}

// entry is an intent, a staged answer or an epoch marker, in journal order.
type entry struct {
	intent *intentReq
	item   *stagedItem
	marker *markerReq
}

type stagedItem struct {
	st    *partState
	off   int64
	emits []emit
	size  int // answerSize, counted in pipeline.staged until settled
}

type intentReq struct {
	st   *partState
	rec  schemas.Record
	raw  []byte // rec sealed: the journal value
	done chan error
}

// journaled is a record of the transaction with its bytes, which are the
// journal value and, once committed, the Pebble value (not for intents).
type journaled struct {
	st     *partState
	rec    *schemas.Record
	raw    []byte
	fresh  bool // emit.fresh
	intent bool // kept out of Pebble (apply)
}

type markerReq struct {
	answered bool // done was sent (committer only)
	p        int32
	epoch    int64
	fence    int64  // committed offset of commands partition p, re-committed as the fence
	member   string // the group membership whose assignment p's restore belongs to
	// abandoned: the restore stopped waiting (its deadline passed), so it
	// will not publish p; the marker must not be written after that.
	abandoned atomic.Bool
	done      chan markerDone
}

type markerDone struct {
	off int64
	err error
}

// Bounds of one transaction: it must end well within the transaction
// timeout, and about a thousand records is past the point where batching
// buys anything (measured on these machines: 730 k/s at 1 000 records per
// transaction). Larger ones cost memory, several times over: a
// transaction's records are encoded again into one produce request (a
// buffer grown by appending, as large as the transaction), then written
// to Pebble as one batch of the same size, and the collector's heap goal
// doubles all of it. 512 answers (1 024 records) hold half of what 1 024
// did, for the same CPU per command (BENCHMARKS.md, "Round 9 (mem)").
const (
	maxFlushEntries = 512
	maxFlushBytes   = 4 << 20
)

// errRetry means the transaction was aborted for a reason that may pass (a
// rebalance changed the generation); staged work is kept for the next one.
var errRetry = errors.New("transaction aborted; will retry")

// errIdle means the queue held nothing that could be published yet.
var errIdle = errors.New("nothing to publish")

func newCommitter(e *Executor, cl *kgo.Client, p *pipeline) *committer {
	return &committer{e: e, cl: cl, p: p, wake: make(chan struct{}, 1), flushes: make(chan chan error), done: make(chan struct{}),
		syncFailed: make(chan error, 1)}
}

// pendingSync is a committed transaction's Pebble batch, applied (visible
// to every read) and syncing; its intent and marker waiters are released
// once the sync ends.
type pendingSync struct {
	done chan struct{} // closed when the sync has ended and the waiters are answered
	err  error         // read after done
}

// ended reports whether the sync has ended (a nil one has).
func (s *pendingSync) ended() bool {
	if s == nil {
		return true
	}
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// joinSync waits for the Pebble syncs under way, if any, and returns the
// first error among them.
func (c *committer) joinSync() error {
	s := c.syncing
	if s == nil {
		return nil
	}
	<-s.done
	c.syncing = nil
	if s.err != nil {
		return fmt.Errorf("pebble commit after transaction: %w", s.err)
	}
	return nil
}

// stopped reports whether the loop has returned: nothing staged from now
// on will be flushed, so nobody may wait for room (memory.go).
func (c *committer) stopped() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *committer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// intent records rec as partition p's next journal entry, with a fencing
// token of its own, and returns that token once the record is committed
// under the current generation, or the reason it is not (errFenced when p
// is no longer ours).
//
// The intent is in the overlay from now on, read before Pebble, until a
// later record of its key is staged: Pebble never gets it from the
// committer (apply). Seen before it commits, it makes a reader wait and
// confirm (inherit) an attempt that was never sent, never the reverse.
func (c *committer) intent(ctx context.Context, p int32, rec schemas.Record) (int64, error) {
	st := c.e.part(p)
	if st == nil || st.lost.Load() {
		return 0, errFenced
	}
	req := &intentReq{st: st, rec: rec, done: make(chan error, 1)}
	c.mu.Lock()
	st.chain.token = max(st.chain.token+1, st.chain.pos)
	req.rec.FencingToken = st.chain.token
	raw, err := c.chain(st, &req.rec)
	if err != nil {
		c.mu.Unlock()
		return 0, err
	}
	req.raw = raw
	c.p.addPending(st, []*schemas.Record{&req.rec})
	c.mu.queue = append(c.mu.queue, entry{intent: req})
	c.mu.Unlock()
	c.poke()
	select {
	case err := <-req.done:
		return req.rec.FencingToken, err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-c.done:
		return 0, errFenced
	}
}

// marker writes an epoch marker for partition p (not yet published as
// owned) in a fenced transaction and returns its journal offset.
func (c *committer) marker(ctx context.Context, p int32, epoch, fence int64, member string) (int64, error) {
	req := &markerReq{p: p, epoch: epoch, fence: fence, member: member, done: make(chan markerDone, 1)}
	c.mu.Lock()
	c.mu.queue = append(c.mu.queue, entry{marker: req})
	c.mu.Unlock()
	c.poke()
	select {
	case d := <-req.done:
		return d.off, d.err
	case <-ctx.Done():
		req.abandoned.Store(true)
		return 0, ctx.Err()
	case <-c.done:
		return 0, errFenced
	}
}

// stage queues a finished command's answers, chaining its journal records,
// and publishes them to the pipeline's overlay so later commands see them
// before Pebble does. Records that would not fit the topics'
// max.message.bytes are shrunk first (fit), so nothing queued can make a
// transaction fail for its size.
func (c *committer) stage(st *partState, off int64, emits []emit, size int) {
	for i := range emits {
		if j := emits[i].journal; j != nil {
			c.e.fit(j)
			if emits[i].outcome != nil && emits[i].outcome != j {
				c.e.fit(emits[i].outcome)
			}
		} else if o := emits[i].outcome; o != nil {
			c.e.fit(o)
		}
	}
	// A record that is its own outcome's data is sealed into the event:
	// its head is written here, outside the lock (wire.OutcomeHead), in
	// a reused buffer (eventBuf) that apply gives back.
	for i := range emits {
		if j := emits[i].journal; j != nil && emits[i].outcome == j {
			eb := getEventBuf(wire.OutcomeSize(j, emits[i].causation))
			eb.b = wire.AppendOutcomeHead(eb.b, j, emits[i].causation, emits[i].replayed)
			emits[i].buf = eb
		}
	}
	c.mu.Lock()
	var buf [2]*schemas.Record // most answers journal one record
	recs := buf[:0]
	for i := range emits {
		if j := emits[i].journal; j != nil {
			var raw []byte
			var err error
			if eb := emits[i].buf; eb != nil {
				eb.b, raw, err = c.chainOutcome(st, j, eb.b)
			} else {
				raw, err = c.chain(st, j)
			}
			if err != nil {
				// Not hashable means not encodable: a bug, never input
				// (fit checked the encoding). Answer without it.
				c.e.log.Error("journal record not hashable; dropped", "key", j.IdempotencyKey, "err", err)
				emits[i].journal = nil
				continue
			}
			emits[i].raw = raw
			recs = append(recs, j) // sealed: not changed from here on

		}
	}
	c.p.addPending(st, recs)
	c.mu.queue = append(c.mu.queue, entry{item: &stagedItem{st: st, off: off, emits: emits, size: size}})
	c.mu.Unlock()
	c.poke()
}

// chain gives rec its place in st's hash chain and returns its bytes
// (caller holds c.mu). Sealing is one pass of the hand-written encoder and
// one SHA-256 over the result: data and result are copied as they are when
// already canonical, which records built by the executor are.
func (c *committer) chain(st *partState, rec *schemas.Record) ([]byte, error) {
	_, raw, err := c.chainOutcome(st, rec, nil)
	return raw, err
}

// chainOutcome is chain for a record that is also its outcome's data: with
// head (wire.OutcomeHead) it is sealed straight into the outcome event
// after head (wire.SealOutcome), whose value it returns with the record's
// bytes, a slice of it. With a nil head it is chain: no event.
func (c *committer) chainOutcome(st *partState, rec *schemas.Record, head []byte) (event, raw []byte, err error) {
	rec.Epoch = st.epoch
	rec.PrevHash = st.chain.hash
	if head == nil {
		raw, err = wire.SealRecord(rec)
	} else {
		event, raw, err = wire.SealOutcome(head, rec)
	}
	if err != nil {
		return nil, nil, err
	}
	st.chain.hash = rec.Hash
	st.chain.pos++
	return event, raw, nil
}

// flushNow commits everything staged so far (revocation, shutdown).
func (c *committer) flushNow(ctx context.Context) error {
	ch := make(chan error, 1)
	select {
	case c.flushes <- ch:
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop flushes until ctx ends; it returns an error only when the client
// must be recreated (EndTransaction failed: the producer is in an unknown
// state).
//
// Everything is flushed as soon as it is queued; whatever is queued while
// a transaction is in flight goes into the next one (group commit). After an abort the
// queue is retried with backoff until it is empty — nothing waits for
// unrelated traffic.
func (c *committer) loop(ctx context.Context) error {
	defer func() {
		// A sync under way ends before the store may be closed; its error
		// is the store's failure, which the executor watches already.
		_ = c.joinSync()
		close(c.done)
		// Workers waiting for staged room see stopped() now.
		c.p.mu.Lock()
		c.p.wakeMemory()
		c.p.mu.Unlock()
	}()
	aborts := 0
	var retry <-chan time.Time
	for {
		var reply chan error
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
			// No linger: work is committed as soon as it is ready, and
			// whatever is queued while a transaction is in flight goes into
			// the next one (group commit). A timer here was 2 ms on every
			// command's latency.
		case <-retry:
		case reply = <-c.flushes:
		case err := <-c.syncFailed:
			// The last transaction's Pebble sync failed with nothing
			// queued after it: as a failed commit in apply would.
			_ = c.joinSync()
			return fmt.Errorf("pebble commit after transaction: %w", err)
		}
		retry = nil
		for {
			err := c.flush(ctx)
			if errors.Is(err, errIdle) {
				break
			}
			if err != nil && !errors.Is(err, errRetry) {
				if reply != nil {
					reply <- err
				}
				return err
			}
			if errors.Is(err, errRetry) {
				aborts++
				if reply != nil {
					reply <- err
					reply = nil
				}
				wait := min(100*time.Millisecond<<min(aborts-1, 5), 3*time.Second)
				lvl := c.e.log.Warn
				if aborts >= 3 {
					lvl = c.e.log.Error
				}
				lvl("transaction aborted; its work is kept and retried", "aborts_in_a_row", aborts, "retry_in", wait, "cause", err)
				retry = time.After(wait)
				break
			}
			aborts = 0
			c.mu.Lock()
			more := len(c.mu.queue) > 0
			c.mu.Unlock()
			if !more {
				break
			}
		}
		if reply != nil {
			// flushNow's callers (revocation, shutdown) get the index
			// synced, as before the sync overlapped the next transaction.
			err := c.joinSync()
			reply <- err
			if err != nil {
				return err
			}
		}
	}
}

// take removes the next transaction's worth of entries from the queue:
// a prefix, so journal order is kept, bounded in entries and bytes.
func (c *committer) take() []entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Entries with nothing to publish (a reconcile request that settled
	// nothing) do not count: a prefix made only of them would publish
	// nothing, and could not commit its offsets.
	n, counted, bytes := 0, 0, 0
	for n < len(c.mu.queue) && counted < maxFlushEntries {
		sz := c.mu.queue[n].size()
		bytes += sz
		if counted > 0 && bytes > maxFlushBytes {
			break
		}
		if sz > 0 {
			counted++
		}
		n++
	}
	q := c.mu.queue[:n:n]
	c.mu.queue = c.mu.queue[n:]
	if len(c.mu.queue) == 0 {
		c.mu.queue = nil
	}
	return q
}

// size estimates an entry's bytes on the wire.
func (en entry) size() int {
	switch {
	case en.intent != nil:
		return len(en.intent.rec.Data) + 1024
	case en.item != nil:
		n := 0
		for _, em := range en.item.emits {
			if em.journal != nil {
				n += 2 * (len(em.journal.Data) + len(em.journal.Result) + 1024)
			} else if em.outcome != nil {
				n += len(em.outcome.Data) + len(em.outcome.Result) + 1024
			}
			if em.deadletter != nil {
				n += len(em.deadletter.Value) + 1024
			}
			if em.forward != nil {
				n += len(em.forward.Value) + 1024
			}
		}
		return n
	}
	return 256
}

func (c *committer) putBack(q []entry) {
	kept := q[:0]
	for _, en := range q {
		if en.marker == nil || !en.marker.answered {
			kept = append(kept, en)
		}
	}
	c.mu.Lock()
	c.mu.queue = append(kept, c.mu.queue...)
	c.mu.Unlock()
}

// answer sends on a waiter's buffered channel without ever blocking the
// committer (a waiter answered twice keeps the first answer).
func answer[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

func (m *markerReq) answer(d markerDone) {
	m.answered = true
	answer(m.done, d)
}

func (c *committer) flush(ctx context.Context) error {
	e := c.e
	// The membership this flush commits under is read before ownership is
	// checked: if the partitions are lost (and maybe given back under a
	// new generation) at any point after this, the offset commit below
	// carries the old generation and is refused, so nothing staged under
	// the old ownership can become visible. Reading it later — at commit
	// time — would let the new generation vouch for old work.
	member, gen := c.cl.GroupMetadata()
	queue := c.take()
	if len(queue) == 0 {
		return errIdle
	}
	queue = c.dropUnowned(queue, member)

	tx := c.encode(queue)
	if tx.ob.Len() == 0 {
		// Nothing to publish (a reconcile request with nothing to do):
		// an offset commit needs a record in the transaction, so these
		// wait for the next flush that has one.
		c.putBack(queue)
		return errIdle
	}
	seals, err := e.seals.seal(tx.ob)
	if err != nil {
		c.putBack(queue)
		return err
	}
	tx.seals = seals
	for _, it := range tx.items {
		it.st.markStaged(it.off)
	}
	wms := map[int32]int64{}   // every owned partition's watermark
	moved := map[int32]int64{} // those this ownership has not committed yet
	var owned []*partState     // with a watermark
	for _, st := range e.ownedStates() {
		if !e.ownedBy(st, member) {
			continue // as dropUnowned
		}
		if wm, ok := st.watermark(); ok {
			wms[st.p] = wm
			owned = append(owned, st)
			if !st.sentAlready(wm) {
				moved[st.p] = wm
			}
		}
	}
	for _, m := range tx.markers {
		if _, ok := wms[m.p]; !ok {
			wms[m.p] = m.fence
		}
		moved[m.p] = wms[m.p] // a marker's partition is always re-committed
	}
	if len(moved) == 0 {
		// The offset commit is the fence: a transaction that moved no
		// watermark (an intent's) still carries one.
		moved = wms
	}
	// What the transaction commits of each ownership, noted by apply once
	// it committed: by partState, not partition, so that a later
	// ownership of the partition starts with nothing sent.
	var sent []sentOffset
	for _, st := range owned {
		if off, ok := moved[st.p]; ok { // an owned partition's is its watermark
			sent = append(sent, sentOffset{st, off})
		}
	}
	e.m.outboxBacklog.Set(float64(tx.ob.Len()))

	landed := c.land()
	defer landed()
	last, err := c.commit(ctx, tx, member, gen, moved)
	if err != nil {
		if errors.Is(err, errRetry) {
			c.putBack(queue)
		}
		return err
	}
	return c.apply(tx, last, wms, sent)
}

// sentOffset is an offset a transaction commits to the group for an
// ownership of its partition.
type sentOffset struct {
	st  *partState
	off int64
}

// dropUnowned drops the work of partitions we no longer own: the new owner
// consumes those commands again (and inherits their intents). Owned means
// held, not lost, and assigned to member, the membership this flush
// commits under: the offset commit's generation vouches only for the
// partitions of its own membership, and the coordinator does not check
// which partitions it names, so work of a partition assigned to an
// earlier membership of this process (kept by the client across an
// eviction, though another member owned it in between) must not ride on
// it.
func (c *committer) dropUnowned(queue []entry, member string) []entry {
	e := c.e
	kept := queue[:0]
	dropped := 0
	var gone []*stagedItem
	for _, en := range queue {
		switch {
		case en.intent != nil && !e.ownedBy(en.intent.st, member):
			e.m.fenced.WithLabelValues("intent").Inc()
			answer(en.intent.done, errFenced)
			c.p.forgetIntent(en.intent.st, &en.intent.rec)
			dropped++
		case en.item != nil && !e.ownedBy(en.item.st, member):
			e.m.fenced.WithLabelValues("answer").Inc()
			gone = append(gone, en.item)
			dropped++
		case en.marker != nil && (en.marker.member != member || en.marker.abandoned.Load()):
			// An epoch marker claims its partition and re-commits its
			// fence offset: under another membership's generation, or
			// after its restore gave up, it would claim a partition this
			// membership may not own, and move its committed offset.
			e.m.fenced.WithLabelValues("marker").Inc()
			en.marker.answer(markerDone{err: errFenced})
			dropped++
		default:
			kept = append(kept, en)
		}
	}
	if len(gone) > 0 {
		// Their overlay entries will never be applied: forget them now
		// rather than leave them to a lookup of the same key, so the
		// overlay stays within what is staged (memory.go).
		c.p.forget(gone)
		c.p.settled(gone)
	}
	if dropped > 0 {
		// A late write of an owner that was replaced (a paused process,
		// a lost session): refused here, before the broker would.
		e.log.Warn("fenced: dropped writes for partitions no longer owned; the new owner answers those commands", "dropped", dropped)
	}
	return kept
}

// ownedBy reports whether st is the held, not lost, state of its
// partition, assigned to member: the one rule for what a flush committing
// under member may carry (work and watermarks alike).
func (e *Executor) ownedBy(st *partState, member string) bool {
	return e.part(st.p) == st && !st.lost.Load() && st.member == member
}

// txn is one transaction's content, encoded.
type txn struct {
	ob        *outbox.Batch
	journaled []journaled
	heads     map[*partState]string
	intents   []*intentReq
	items     []*stagedItem
	markers   []*markerReq
	seals     *txSeals // WithSignedJournal: the seals added and every entry's leaf hash
}

func (c *committer) encode(queue []entry) *txn {
	e := c.e
	// Most entries are answers of one journal record and one outcome.
	tx := &txn{ob: outbox.NewBatchSize(e.obTopics, 2*len(queue)), heads: map[*partState]string{},
		journaled: make([]journaled, 0, len(queue)), items: make([]*stagedItem, 0, len(queue))}
	ob := tx.ob
	for _, en := range queue {
		if m := en.marker; m != nil {
			tx.markers = append(tx.markers, m)
			ob.Epoch(m.p, m.epoch, e.cfg.ExecutorID, e.nPart)
			continue
		}
		if r := en.intent; r != nil {
			tx.intents = append(tx.intents, r)
			if err := ob.JournalBytes(r.st.p, &r.rec, r.raw); err != nil {
				answer(r.done, err)
				continue
			}
			tx.journaled = append(tx.journaled, journaled{st: r.st, rec: &r.rec, raw: r.raw, intent: true})
			tx.heads[r.st] = r.rec.Hash
			continue
		}
		it := en.item
		tx.items = append(tx.items, it)
		for _, em := range it.emits {
			switch {
			case em.deadletter != nil:
				ob.Deadletter(em.deadletter, em.reason)
				continue
			case em.forward != nil:
				// Built and checked against the limit when the command was
				// routed: staged as it is, not built again.
				ob.StageForward(em.fwdCopy)
				continue
			}
			if em.journal != nil {
				var err error
				if em.buf != nil {
					err = ob.JournalBytesIn(&em.buf.msgs, it.st.p, em.journal, em.raw)
				} else {
					err = ob.JournalBytes(it.st.p, em.journal, em.raw)
				}
				if err != nil {
					e.log.Error("journal record not encodable; dropped", "key", em.journal.IdempotencyKey, "err", err)
					continue
				}
				tx.journaled = append(tx.journaled, journaled{st: it.st, rec: em.journal, raw: em.raw, fresh: em.fresh})
				tx.heads[it.st] = em.journal.Hash
			}
			if o := em.outcome; o != nil {
				// The outcome's data is the record's bytes where they
				// exist (sealed just now, or as stored for a replay),
				// else the record encoded.
				var err error
				switch {
				case o == em.journal && em.buf != nil:
					err = ob.OutcomeEventIn(&em.buf.msgs, o, em.buf.b)
				case o == em.journal:
					err = ob.OutcomeBytes(o, em.raw, em.causation, em.replayed)
				case em.stored != nil:
					err = ob.OutcomeBytes(o, em.stored, em.causation, em.replayed)
				default:
					err = ob.Outcome(*o, em.causation, em.replayed)
				}
				if err != nil {
					e.log.Error("outcome not encodable; dropped", "key", o.IdempotencyKey, "err", err)
				}
			}
		}
	}
	return tx
}

// commit runs the transaction and returns the last journal offset written
// per partition. errRetry: aborted, the work may be retried.
func (c *committer) commit(ctx context.Context, tx *txn, member string, gen int32, wms map[int32]int64) (map[int32]int64, error) {
	e := c.e
	if err := c.cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("begin transaction: %w", err)
	}
	abort := func(cause error) error {
		if err := c.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			return fmt.Errorf("abort after %v: %w", cause, err)
		}
		e.m.txns.WithLabelValues("aborted").Inc()
		return fmt.Errorf("%w: %v", errRetry, cause)
	}
	last, err := tx.ob.Produce(ctx, c.cl)
	if err != nil {
		return nil, abort(err)
	}
	if err := c.commitOffsets(ctx, member, gen, wms); err != nil {
		if isGenerationErr(err) {
			e.m.fenced.WithLabelValues("commit").Inc()
			e.log.Warn("offset commit refused: not a member of the current generation; transaction aborted", "err", err)
			// A marker refused for its generation will not pass later:
			// its restore belongs to an assignment that is over.
			for _, m := range tx.markers {
				m.answer(markerDone{err: fmt.Errorf("%w: %v", errFenced, err)})
			}
		}
		return nil, abort(err)
	}
	if err := c.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		for _, r := range tx.intents {
			answer(r.done, err)
		}
		for _, m := range tx.markers {
			m.answer(markerDone{err: err})
		}
		return nil, fmt.Errorf("end transaction: %w", err)
	}
	e.m.txns.WithLabelValues("committed").Inc()
	e.m.outboxBacklog.Set(0)
	return last, nil
}

// apply makes Pebble agree with a committed transaction, then releases
// waiters and watermarks.
//
// Intents are not written: their waiters are released at once (the
// committed transaction is what an attempt needs), they stay in the
// overlay, and each partition's stored Progress stays before its oldest
// open intent (partState.storedProgress), so a restore replays them.
//
// The records' batch is synced, but the loop does not wait for the fsync:
// the batch is visible to reads when CommitSyncLater returns, and its
// fsync overlaps the next transaction's broker round trips (a new key's
// fsync was ~0.5 ms of the next command's latency, BENCHMARKS.md round 9
// (latency)). What needs the records durable waits for it: the marker
// waiters are released once it and every earlier sync ended, and
// a flushNow and the loop's end wait for them too (joinSync). A failed
// sync fails the store: the next apply's commit fails, and an idle loop
// learns it from syncFailed. A crash before
// the sync ends is the crash between the transaction and its Pebble
// commit that restore already covers: the journal holds the records.
//
// wms is every owned partition's watermark, sent the offsets the
// transaction committed to the group.
func (c *committer) apply(tx *txn, last, wms map[int32]int64, sent []sentOffset) error {
	e := c.e
	for _, r := range tx.intents {
		answer(r.done, nil)
	}
	b := e.store.NewBatchSize(len(tx.journaled))
	defer b.Close()
	written := c.holdIntents(b, tx.journaled)
	for st, h := range tx.heads {
		st.committed.hash = h
		if off, ok := last[st.p]; ok {
			st.committed.next = off + 1
			c.mu.Lock()
			st.chain.pos = max(st.chain.pos, off+1)
			c.mu.Unlock()
		}
	}
	for _, s := range sent {
		s.st.offsetSent(s.off)
	}
	type progressOf struct {
		st   *partState
		prog dedupe.Progress
	}
	var progs []progressOf // written by b
	for _, st := range e.ownedStates() {
		if wm, ok := wms[st.p]; ok {
			st.committedTo(wm)
		}
		if note, ok := tx.seals.noteOf(st.p); ok {
			// The seal is the last record tx wrote to the partition.
			st.committed.sealNote, st.committed.sealOff = string(note), last[st.p]
		}
		c.mu.Lock()
		tok := st.chain.token
		c.mu.Unlock()
		if prog, changed := st.progressToStore(tok); changed {
			b.SetProgress(st.p, prog)
			progs = append(progs, progressOf{st, prog})
		}
	}
	// A transaction without records (repeats answered from their record,
	// forwards, deadletters) changes at most Progress in Pebble (often
	// nothing: an empty batch writes nothing): losing that in a crash
	// costs a replay from the older offset, so it is not worth an fsync on
	// every repeat's latency.
	var syncWait func() error // nil: nothing to wait for
	var err error
	if written == 0 {
		err = b.CommitNoSync()
	} else {
		syncWait, err = b.CommitSyncLater()
	}
	if err != nil {
		// The journal has it; a restore rebuilds Pebble. Keep going
		// would let lookups miss committed records: recreate instead.
		return fmt.Errorf("pebble commit after transaction: %w", err)
	}
	for _, p := range progs {
		p.st.progressStored(p.prog)
	}
	c.p.applied(tx.journaled)
	c.p.settled(tx.items)
	c.e.seals.committed(tx.seals)
	c.e.cp.committed(tx.ob.Entries(), tx.seals)
	release := func() {
		for _, m := range tx.markers {
			m.answer(markerDone{off: last[m.p]})
		}
	}
	prev := c.syncing
	switch {
	case syncWait == nil && len(tx.markers) == 0:
		// Nothing to sync, nobody to release.
	case syncWait == nil && prev.ended():
		release()
	default:
		// Waiters are released in transaction order, once this sync and
		// every earlier one ended: prev is only captured, so finished
		// syncs are not kept in a chain.
		s := &pendingSync{done: make(chan struct{})}
		c.syncing = s
		go func() {
			defer close(s.done)
			var err error
			if syncWait != nil {
				err = syncWait()
			}
			if prev != nil {
				<-prev.done
				err = cmp.Or(err, prev.err)
			}
			if s.err = err; err != nil {
				answer(c.syncFailed, err)
				return
			}
			release()
		}()
	}
	var answers answerTally
	for _, it := range tx.items {
		for i := range it.emits {
			em := &it.emits[i]
			if o := em.outcome; o != nil {
				answers.add(e.m.commands, o.Action, string(o.Status))
			}
			c.logNotable(it, em)
			if em.buf != nil {
				// Produced, committed, in Pebble and hashed: nothing
				// reads the event's bytes any more (eventBuf).
				em.raw = nil
				putEventBuf(em.buf)
				em.buf = nil
			}
		}
	}
	answers.addTo(e.m.commands)
	return nil
}

// holdIntents puts tx's records other than intents into b, in journal
// order, and keeps the partitions' open intents (partState.held): an
// intent opens a hold at the Progress stored before tx (its partition's
// committed state is still that one here), a later record of its key in
// b closes it. It returns how many records it put. Ownerships that ended
// lose their intents from the overlay: nothing will replace them there.
func (c *committer) holdIntents(b *dedupe.Batch, recs []journaled) (written int) {
	var holds map[*partState]*intentHold // this transaction's, per partition
	for _, j := range recs {
		k := scopeOf(j.rec)
		if !j.intent {
			j.st.closeIntent(k)
			if j.fresh {
				// Sealed when staged: nothing changes it any more.
				b.PutNewRecordRef(j.rec, j.raw)
			} else {
				b.PutRecordBytes(*j.rec, j.raw)
			}
			written++
			continue
		}
		h := holds[j.st]
		if h == nil {
			h = &intentHold{prog: j.st.progress(0)}
			if holds == nil {
				holds = map[*partState]*intentHold{}
			}
			holds[j.st] = h
			j.st.held.holds = append(j.st.held.holds, h)
			if c.holding == nil {
				c.holding = map[*partState]bool{}
			}
			c.holding[j.st] = true
		}
		j.st.openIntent(k, h)
	}
	for st := range c.holding {
		switch {
		case len(st.held.open) == 0:
			delete(c.holding, st)
		case c.e.part(st.p) != st || st.lost.Load():
			c.p.forgetIntents(st)
			delete(c.holding, st)
		}
	}
	return written
}

// logNotable writes one line, once committed, for each answer a person may
// need to look at: an unresolved or held execution, a command refused by
// allowed_sources, a deadlettered record, a forwarded command.
func (c *committer) logNotable(it *stagedItem, em *emit) {
	log := c.e.log
	switch {
	case em.deadletter != nil:
		log.Warn("command deadlettered", "partition", it.st.p, "offset", em.deadletter.Offset, "reason", em.reason)
	case em.forward != nil:
		log.Info("command forwarded to its entity's partition", "entity", em.entity, "partition", it.st.p, "offset", em.forward.Offset, "to", em.to)
	case em.outcome != nil && !em.replayed:
		o := em.outcome
		if o.Status != schemas.StatusUnresolved && o.Status != schemas.StatusHeld && o.Status != schemas.StatusRejected {
			return // the common case: nothing to say, nothing to build
		}
		attrs := []any{"key", o.IdempotencyKey, "entity", o.Entity, "action", o.Action, "partition", o.Command.Partition, "offset", o.Command.Offset}
		switch {
		case o.Status == schemas.StatusUnresolved:
			msg := ""
			if o.Error != nil {
				msg = o.Error.Code + ": " + o.Error.Message
			}
			log.Warn("execution unresolved: an operator must confirm or resolve it", append(attrs, "error", msg)...)
		case o.Status == schemas.StatusHeld:
			log.Warn("execution held as a suspected duplicate: approve or resolve it", attrs...)
		case o.Status == schemas.StatusRejected && o.Error != nil && o.Error.Code == schemas.CodeNotAllowed:
			log.Warn("command rejected: source not allowed", append(attrs, "source", o.Command.Source)...)
		}
	}
}

// commitOffsets adds the group's offsets to the open transaction: the
// KIP-447 TxnOffsetCommit carrying the generation and member id, which the
// coordinator refuses for a member that has been replaced. franz-go's
// GroupTransactSession does the same, but commits every polled offset; the
// executor needs the low watermark instead, so it issues the requests itself.
func (c *committer) commitOffsets(ctx context.Context, member string, gen int32, wms map[int32]int64) error {
	if len(wms) == 0 {
		return nil
	}
	e := c.e
	if member == "" {
		return fmt.Errorf("%w: no group membership", kerr.UnknownMemberID)
	}
	pid, epoch, err := c.cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("producer id: %w", err)
	}
	txnID := e.txnID()
	if !c.groupImplicit {
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID = txnID
		add.ProducerID = pid
		add.ProducerEpoch = epoch
		add.Group = e.cfg.Group
		addResp, err := add.RequestWith(ctx, c.cl)
		if err != nil {
			return fmt.Errorf("add offsets to transaction: %w", err)
		}
		if err := kerr.ErrorForCode(addResp.ErrorCode); err != nil {
			return fmt.Errorf("add offsets to transaction: %w", err)
		}
	}
	// Whatever happens below, the next transaction adds the group itself
	// unless this one proves it need not.
	c.groupImplicit = false
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID = txnID
	req.Group = e.cfg.Group
	req.ProducerID = pid
	req.ProducerEpoch = epoch
	req.Generation = gen
	req.MemberID = member
	t := kmsg.NewTxnOffsetCommitRequestTopic()
	t.Topic = e.cfg.Topics.Commands
	t.TopicID = e.commandsID // v6+ names topics by id
	ps := make([]int32, 0, len(wms))
	for p := range wms {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	for _, p := range ps {
		pp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		pp.Partition = p
		pp.Offset = wms[p]
		pp.LeaderEpoch = -1
		t.Partitions = append(t.Partitions, pp)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return fmt.Errorf("txn offset commit: %w", err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("txn offset commit %s/%d: %w", rt.Topic, rp.Partition, err)
			}
		}
	}
	// Under KIP-890 part 2 (transaction.version 2, Kafka 4.0+), a
	// TxnOffsetCommit of v5 or later adds the group to the transaction
	// itself, as a Produce adds its partition: AddOffsetsToTxn is one
	// broker round trip of every transaction for nothing (~0.17 ms of a
	// command's latency, BENCHMARKS.md round 9 (latency)). franz-go skips
	// it exactly then, and so does this, once the client is seen to run
	// that protocol: this commit went as v5+ and the client never sent an
	// AddPartitionsToTxn (which it does before every transaction's first
	// Produce otherwise). Any failure above sends it again.
	c.groupImplicit = req.GetVersion() >= 5 && !e.addedPartitions.Load()
	return nil
}

// txnAddsHook notes in seen that the client sent an AddPartitionsToTxn.
type txnAddsHook struct{ seen *atomic.Bool }

var _ kgo.HookBrokerWrite = txnAddsHook{}

func (h txnAddsHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.AddPartitionsToTxn) {
		h.seen.Store(true)
	}
}

func isGenerationErr(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) ||
		errors.Is(err, kerr.FencedInstanceID) || errors.Is(err, kerr.RebalanceInProgress)
}
