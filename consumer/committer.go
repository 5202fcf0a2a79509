package consumer

import (
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

	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/outbox"
	"github.com/onceflight/onceflight/schemas"
)

// committer is the only writer of Kafka transactions and of Pebble (outside
// restore). Each flush is one transaction holding
//
//   - the intents waiting to be recorded (in_progress, attempt, deadline,
//     fencing token),
//   - the staged answers of finished commands (final journal records,
//     outcome events, deadletters, forwards), and
//   - a TxnOffsetCommit of every owned partition's low watermark, sent with
//     the group generation and member id (KIP-447).
//
// The offset commit is the fence: a process that is no longer a member of
// the current generation — a zombie after a pause — has it refused, aborts
// the transaction, and nothing it wrote becomes visible. An intent's waiter
// is released only after its transaction committed, so every connector
// attempt is preceded by a fenced, durable record that a later owner's
// restore will read (it restores only after its own, later, assignment).
// Pebble is updated after the commit, as a cache of what committed.
type committer struct {
	e  *Executor
	cl *kgo.Client
	p  *pipeline

	// mu guards queue and every partState's chain (epoch, chainHash):
	// hashes are assigned in the order entries are queued, which is the
	// order the flush writes them, so the journal's chain is that order.
	mu      sync.Mutex
	queue   []entry
	wake    chan struct{}
	flushes chan chan error
	done    chan struct{}
}

// entry is an intent or a staged answer, in journal order.
type entry struct {
	intent *intentReq
	item   *stagedItem
}

type stagedItem struct {
	st    *partState
	off   int64
	emits []emit
}

type intentReq struct {
	st   *partState
	rec  schemas.Record
	done chan error
}

// errRetry means the transaction was aborted for a reason that may pass (a
// rebalance changed the generation); staged work is kept for the next one.
var errRetry = errors.New("transaction aborted; will retry")

// errIdle means the queue held nothing that could be published yet.
var errIdle = errors.New("nothing to publish")

func newCommitter(e *Executor, cl *kgo.Client, p *pipeline) *committer {
	return &committer{e: e, cl: cl, p: p, wake: make(chan struct{}, 1), flushes: make(chan chan error), done: make(chan struct{})}
}

func (c *committer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// intent records rec as partition p's next journal entry and returns once
// it is committed under the current generation, or with the reason it is
// not (errFenced when p is no longer ours).
func (c *committer) intent(ctx context.Context, p int32, rec schemas.Record) error {
	st := c.e.part(p)
	if st == nil || st.lost.Load() {
		return errFenced
	}
	req := &intentReq{st: st, rec: rec, done: make(chan error, 1)}
	c.mu.Lock()
	if err := c.chain(st, &req.rec); err != nil {
		c.mu.Unlock()
		return err
	}
	c.queue = append(c.queue, entry{intent: req})
	c.mu.Unlock()
	c.poke()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return errFenced
	}
}

// stage queues a finished command's answers, chaining its journal records,
// and publishes them to the pipeline's overlay so later commands see them
// before Pebble does.
func (c *committer) stage(st *partState, off int64, emits []emit) {
	c.mu.Lock()
	var recs []schemas.Record
	for i := range emits {
		if j := emits[i].journal; j != nil {
			if err := c.chain(st, j); err != nil {
				c.e.log.Error("journal record not hashable; dropped", "key", j.IdempotencyKey, "err", err)
				emits[i].journal = nil
				continue
			}
			recs = append(recs, *j)
		}
	}
	c.p.addPending(st, recs)
	c.queue = append(c.queue, entry{item: &stagedItem{st: st, off: off, emits: emits}})
	c.mu.Unlock()
	c.poke()
}

// chain gives rec its place in st's hash chain (caller holds c.mu).
func (c *committer) chain(st *partState, rec *schemas.Record) error {
	rec.Epoch = st.epoch
	rec.PrevHash = st.chainHash
	h, err := schemas.HashRecord(st.chainHash, *rec)
	if err != nil {
		return err
	}
	rec.Hash = h
	st.chainHash = h
	return nil
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
func (c *committer) loop(ctx context.Context) error {
	defer close(c.done)
	for {
		var reply chan error
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
			// Group commit: answers without a waiting intent linger a
			// moment so that one transaction carries many of them.
			c.mu.Lock()
			urgent := false
			for _, en := range c.queue {
				if en.intent != nil {
					urgent = true
					break
				}
			}
			c.mu.Unlock()
			if !urgent {
				select {
				case <-time.After(2 * time.Millisecond):
				case <-ctx.Done():
					return nil
				}
			}
		case reply = <-c.flushes:
		}
		// Flush until nothing is left, so work staged during a flush
		// does not wait for another wake-up.
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
				if reply != nil {
					reply <- err
					reply = nil
				}
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return nil
				}
				break
			}
			c.mu.Lock()
			more := len(c.queue) > 0
			c.mu.Unlock()
			if !more {
				break
			}
		}
		if reply != nil {
			reply <- nil
		}
	}
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
	c.mu.Lock()
	queue := c.queue
	c.queue = nil
	c.mu.Unlock()
	if len(queue) == 0 {
		return nil
	}
	// Work of partitions we no longer own is dropped: the new owner
	// consumes those commands again (and inherits their intents).
	owned := func(st *partState) bool { return e.part(st.p) == st && !st.lost.Load() }
	kept := queue[:0]
	dropped := 0
	for _, en := range queue {
		switch {
		case en.intent != nil && !owned(en.intent.st):
			e.m.fenced.WithLabelValues("intent").Inc()
			en.intent.done <- errFenced
			dropped++
		case en.item != nil && !owned(en.item.st):
			e.m.fenced.WithLabelValues("answer").Inc()
			dropped++
		default:
			kept = append(kept, en)
		}
	}
	if dropped > 0 {
		// A late write of an owner that was replaced (a paused process,
		// a lost session): refused here, before the broker would.
		e.log.Warn("fenced: dropped writes for partitions no longer owned; the new owner answers those commands", "dropped", dropped)
	}
	queue = kept

	ob := outbox.NewBatch(outbox.Topics{
		Journal: e.cfg.Topics.Journal, Outcomes: e.cfg.Topics.Outcomes,
		Deadletter: e.cfg.Topics.Deadletter, Commands: e.cfg.Topics.Commands, Partitions: e.counts,
	})
	var (
		journaled []schemas.Record
		heads     = map[*partState]string{}
		intents   []*intentReq
		items     []*stagedItem
	)
	for _, en := range queue {
		if r := en.intent; r != nil {
			intents = append(intents, r)
			if err := ob.Journal(r.st.p, r.rec); err != nil {
				r.done <- err
				continue
			}
			journaled = append(journaled, r.rec)
			heads[r.st] = r.rec.Hash
			continue
		}
		it := en.item
		items = append(items, it)
		for _, em := range it.emits {
			switch {
			case em.deadletter != nil:
				ob.Deadletter(em.deadletter, em.reason)
				continue
			case em.forward != nil:
				if err := ob.Forward(em.forward, em.entity, em.to); err != nil {
					e.log.Error("forward too large; deadlettered instead", "entity", em.entity, "err", err)
					ob.Deadletter(em.forward, err.Error())
				}
				continue
			}
			if em.journal != nil {
				if err := ob.Journal(it.st.p, *em.journal); err != nil {
					e.log.Error("journal record not encodable; dropped", "key", em.journal.IdempotencyKey, "err", err)
					continue
				}
				journaled = append(journaled, *em.journal)
				heads[it.st] = em.journal.Hash
			}
			if em.outcome != nil {
				if err := ob.Outcome(*em.outcome, em.causation, em.replayed); err != nil {
					e.log.Error("outcome not encodable; dropped", "key", em.outcome.IdempotencyKey, "err", err)
				}
			}
		}
	}
	putBack := func() {
		c.mu.Lock()
		c.queue = append(queue, c.queue...)
		c.mu.Unlock()
	}
	if ob.Len() == 0 {
		// Nothing to publish (a reconcile request with nothing to do):
		// an offset commit needs a record in the transaction, so these
		// wait for the next flush that has one.
		putBack()
		return errIdle
	}
	for _, it := range items {
		it.st.markStaged(it.off)
	}
	wms := map[int32]int64{}
	for _, st := range e.ownedStates() {
		if wm, ok := st.watermark(); ok {
			wms[st.p] = wm
		}
	}
	e.m.outboxBacklog.Set(float64(ob.Len()))

	if err := c.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	abort := func(cause error) error {
		e.log.Debug("transaction aborted; staged work kept for the next", "cause", cause)
		if err := c.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			return fmt.Errorf("abort after %v: %w", cause, err)
		}
		e.m.txns.WithLabelValues("aborted").Inc()
		putBack()
		return fmt.Errorf("%w: %v", errRetry, cause)
	}
	last, err := ob.Produce(ctx, c.cl)
	if err != nil {
		return abort(err)
	}
	if err := c.commitOffsets(ctx, member, gen, wms); err != nil {
		if isGenerationErr(err) {
			e.m.fenced.WithLabelValues("commit").Inc()
			e.log.Warn("offset commit refused: not a member of the current generation; transaction aborted", "err", err)
		}
		return abort(err)
	}
	if err := c.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		for _, r := range intents {
			r.done <- err
		}
		return fmt.Errorf("end transaction: %w", err)
	}
	e.m.txns.WithLabelValues("committed").Inc()
	e.m.outboxBacklog.Set(0)

	// Committed: make Pebble agree, then release waiters and watermarks.
	b := e.store.NewBatch()
	defer b.Close()
	for _, rec := range journaled {
		b.PutRecord(rec)
	}
	for st, h := range heads {
		st.lastHash = h
		if off, ok := last[st.p]; ok {
			st.next = off + 1
		}
	}
	for _, st := range e.ownedStates() {
		if wm, ok := wms[st.p]; ok {
			st.committedTo(wm)
		}
		b.SetProgress(st.p, st.progress())
	}
	if err := b.Commit(); err != nil {
		// The journal has it; a restore rebuilds Pebble. Keep going
		// would let lookups miss committed records: recreate instead.
		return fmt.Errorf("pebble commit after transaction: %w", err)
	}
	c.p.applied(journaled)
	for _, r := range intents {
		select {
		case r.done <- nil:
		default:
		}
	}
	unresolvedChanged := false
	for _, it := range items {
		for _, em := range it.emits {
			if em.outcome != nil {
				e.m.commands.WithLabelValues(em.outcome.Action, string(em.outcome.Status)).Inc()
			}
			if em.journal != nil && (em.journal.Status == schemas.StatusUnresolved || em.journal.Resolution != nil) {
				unresolvedChanged = true
			}
		}
	}
	if unresolvedChanged {
		e.refreshUnresolved()
	}
	return nil
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
	return nil
}

func isGenerationErr(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) ||
		errors.Is(err, kerr.FencedInstanceID) || errors.Is(err, kerr.RebalanceInProgress)
}

// partState is what the owner of a partition keeps in memory. The chain
// fields (epoch, lastHash, next) are written only by restore (before the
// partition is published) and by the committer.
type partState struct {
	p        int32
	epoch    int64
	tokenSeq int64
	lastHash string // hash of the last committed record
	next     int64  // next journal offset (progress)
	// chainHash is the hash of the last record queued (committer.mu);
	// it runs ahead of lastHash by what is not committed yet.
	chainHash string

	lost     atomic.Bool
	draining atomic.Bool
	sem      chan struct{}   // bounds the partition's executions in flight
	ctx      context.Context // cancelled when the partition is lost
	cancel   context.CancelFunc

	wmu       sync.Mutex
	offs      []offEntry // tracked command offsets, in order
	maxSeen   int64
	committed int64 // -1 until known
	inflight  int   // commands of this partition being handled (guarded by pipeline.mu)
}

type offEntry struct {
	off    int64
	staged bool
}

func newPartState(p int32, epoch int64, lastHash string, next int64) *partState {
	ctx, cancel := context.WithCancel(context.Background())
	return &partState{p: p, epoch: epoch, lastHash: lastHash, chainHash: lastHash, next: next, ctx: ctx, cancel: cancel, maxSeen: -1, committed: -1}
}

// track registers a consumed offset; false if it was seen already.
func (st *partState) track(off int64) bool {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if off <= st.maxSeen {
		return false
	}
	if st.committed < 0 {
		// The first record fetched after assignment starts at the
		// committed offset.
		st.committed = off
	}
	st.maxSeen = off
	st.offs = append(st.offs, offEntry{off: off})
	return true
}

func (st *partState) markStaged(off int64) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	i := sort.Search(len(st.offs), func(i int) bool { return st.offs[i].off >= off })
	if i < len(st.offs) && st.offs[i].off == off {
		st.offs[i].staged = true
	}
}

// watermark is the offset to commit: below it every tracked command is
// answered in this or an earlier transaction.
func (st *partState) watermark() (int64, bool) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.committed < 0 {
		return 0, false
	}
	wm := st.committed
	for _, o := range st.offs {
		if !o.staged {
			return wm, true
		}
		wm = o.off + 1
	}
	return wm, true
}

// committedTo drops tracked offsets below wm.
func (st *partState) committedTo(wm int64) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	i := 0
	for i < len(st.offs) && st.offs[i].off < wm {
		i++
	}
	st.offs = append(st.offs[:0], st.offs[i:]...)
	if wm > st.committed {
		st.committed = wm
	}
}

// nextToken returns a fencing token that strictly increases for every
// entity of the partition across executions and owners: the epoch, bumped
// by each new owner in the journal, is the high half.
func (st *partState) nextToken() int64 {
	return st.epoch<<32 | atomic.AddInt64(&st.tokenSeq, 1)
}

func (st *partState) progress() dedupe.Progress {
	return dedupe.Progress{JournalOffset: st.next, Epoch: st.epoch, LastHash: st.lastHash, TokenSeq: atomic.LoadInt64(&st.tokenSeq)}
}
