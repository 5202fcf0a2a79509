package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/outbox"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// Control command types: operator and reconciler requests travel through
// the commands topic, so they are ordered with the entity's commands and
// applied by the entity's owner under the same fence as everything else.
const (
	TypeResolve   = "onceflight.resolve"
	TypeReconcile = "onceflight.reconcile"
)

// A cycle processes one poll. Its shape is what makes G4 hold with KIP-447:
//
//  1. every polled command is answered in memory: replayed, rejected,
//     deadlettered, forwarded, or executed (one goroutine per entity, so an
//     entity's commands run one at a time and in partition order, while
//     different entities run concurrently under MaxInflight);
//  2. before each connector attempt its intent (in_progress, deadline,
//     fencing token) is committed to the journal and this process proves it
//     still owns the partition (intentWriter);
//  3. the final records, outcome events, deadletters and forwards are
//     produced in one transaction that also commits the polled offsets under
//     the group's generation; a zombie's transaction is refused there;
//  4. only after the commit is Pebble updated (records + progress in one
//     synced batch). An aborted cycle leaves the intents, which the next
//     owner — maybe us — settles by confirmation, never by blind retry.
type cycle struct {
	e    *Executor
	sess *kgo.GroupTransactSession
	iw   *intentWriter

	mu     sync.Mutex
	emits  []emit
	finals map[string]schemas.Record // records decided this cycle, not yet in Pebble
	claims map[string]string         // key → fingerprint of its first command this cycle
	abort  error
}

// emit is one answer, staged in the order answers were decided.
type emit struct {
	journal    *schemas.Record // state change to journal, nil for none
	outcome    *schemas.Record
	causation  string
	replayed   bool
	deadletter *kgo.Record
	reason     string
	forward    *kgo.Record
	entity     string
	to         int32
}

type item struct {
	rec *kgo.Record
	cmd schemas.Command
}

func (e *Executor) runCycle(ctx context.Context, sess *kgo.GroupTransactSession, recs []*kgo.Record) error {
	c := &cycle{e: e, sess: sess, finals: map[string]schemas.Record{}, claims: map[string]string{}}
	c.iw = newIntentWriter(e, sess.Client())
	iwCtx, stopIW := context.WithCancel(ctx)
	iwDone := make(chan struct{})
	go func() { defer close(iwDone); c.iw.loop(iwCtx) }()

	// Group by entity in partition order. A partition we do not own (not
	// restored, or revoked while polling) aborts the cycle: its offsets
	// must not be committed by us.
	byEntity := map[string][]*item{}
	var order []string
	for _, r := range recs {
		if st := e.part(r.Partition); st == nil || st.lost.Load() {
			c.fail(fmt.Errorf("%w: record from partition %d", errFenced, r.Partition))
			continue
		}
		cmd, err := schemas.DecodeCommand(r, e.cfg.MaxDataBytes)
		if err != nil {
			c.undecodable(r, err)
			continue
		}
		if want := partitioner.ForEntity(cmd.Subject, e.nPart); want != r.Partition {
			// Never executed where it landed (SPEC §4): the entity's
			// owner is whoever owns partition want.
			c.add(emit{forward: r, entity: cmd.Subject, to: want})
			e.m.forwarded.Inc()
			continue
		}
		if _, ok := byEntity[cmd.Subject]; !ok {
			order = append(order, cmd.Subject)
		}
		byEntity[cmd.Subject] = append(byEntity[cmd.Subject], &item{rec: r, cmd: cmd})
	}

	var wg sync.WaitGroup
	for _, ent := range order {
		items := byEntity[ent]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.runEntity(ctx, items)
		}()
	}
	wg.Wait()
	stopIW()
	<-iwDone
	return c.finish(ctx)
}

// runEntity is the single flight of one entity within the cycle.
func (c *cycle) runEntity(ctx context.Context, items []*item) {
	es, _, err := c.e.store.Entity(items[0].cmd.Subject)
	if err != nil {
		c.fail(fmt.Errorf("entity %q: %w", items[0].cmd.Subject, err))
		return
	}
	version := es.Version
	for _, it := range items {
		if c.aborted() {
			return
		}
		if st := c.e.part(it.rec.Partition); st == nil || st.lost.Load() {
			c.fail(errFenced)
			return
		}
		c.handle(ctx, it, &version)
	}
}

func (c *cycle) handle(ctx context.Context, it *item, version *int64) {
	cmd := it.cmd
	prev, found, err := c.lookup(cmd.IdempotencyKey)
	if err != nil {
		c.fail(err)
		return
	}
	if found && prev.Fingerprint != cmd.Fingerprint {
		c.reject(cmd, schemas.CodeKeyReused, fmt.Sprintf(
			"idempotency key %q is already recorded for another command (%s, entity %q); the original record is unchanged",
			cmd.IdempotencyKey, prev.Action, prev.Entity), false)
		return
	}
	if !found && !c.claim(cmd.IdempotencyKey, cmd.Fingerprint) {
		c.reject(cmd, schemas.CodeKeyReused, fmt.Sprintf(
			"idempotency key %q is used by another command in flight", cmd.IdempotencyKey), false)
		return
	}
	if found {
		switch {
		case prev.Status.Final() || prev.Status == schemas.StatusHeld:
			c.replay(cmd, prev)
		case prev.Status == schemas.StatusInProgress:
			c.inherit(ctx, cmd, prev, version)
		}
		return
	}
	switch cmd.Type {
	case TypeResolve:
		c.resolve(cmd)
		return
	case TypeReconcile:
		c.reconcileKey(ctx, cmd, version)
		return
	}
	if cmd.Deadline != nil && time.Now().After(*cmd.Deadline) {
		c.reject(cmd, schemas.CodeExpired, fmt.Sprintf("deadline %s passed before the command started", cmd.Deadline.Format(time.RFC3339)), true)
		return
	}
	a := c.e.actions[cmd.Type]
	if a == nil {
		c.reject(cmd, schemas.CodeUnknownAction, fmt.Sprintf("action %q is not configured", cmd.Type), true)
		return
	}
	if !a.cfg.SourceAllowed(cmd.Source) {
		c.reject(cmd, schemas.CodeNotAllowed, fmt.Sprintf("source %q is not allowed for action %q", cmd.Source, cmd.Type), true)
		return
	}
	if err := a.cfg.ValidateData(cmd.Data); err != nil {
		c.reject(cmd, schemas.CodeInvalidCommand, fmt.Sprintf("data does not match the schema of %q: %v", cmd.Type, err), true)
		return
	}
	if cmd.ExpectedVersion != nil && *cmd.ExpectedVersion != *version {
		c.reject(cmd, schemas.CodeVersionConflict, fmt.Sprintf("expected entity version %d, entity %q is at %d", *cmd.ExpectedVersion, cmd.Subject, *version), true)
		return
	}
	c.execute(ctx, cmd, a, version)
}

// execute runs a new command through its connector.
func (c *cycle) execute(ctx context.Context, cmd schemas.Command, a *action, version *int64) {
	now := time.Now().UTC()
	rec := c.base(cmd)
	rec.StartedAt = &now
	rec.Data = cmd.Data
	c.run(ctx, a, rec, cmd.ID, false, version, func(ctx context.Context, req connectors.Request, opt connectors.PerformOption) connectors.Decision {
		return connectors.Perform(ctx, a.conn, req, a.policy, opt)
	})
}

// inherit settles a key left in_progress by an earlier owner (or by our own
// aborted cycle): wait until its recorded deadline plus the clock-drift
// margin has passed — the old attempt can no longer be sent after it — then
// confirm before anything else (G3).
func (c *cycle) inherit(ctx context.Context, cmd schemas.Command, prev schemas.Record, version *int64) {
	if prev.Deadline != nil {
		wait := time.Until(prev.Deadline.Add(c.e.cfg.ClockDrift))
		if wait > 0 {
			c.e.log.Info("waiting for an inherited execution's deadline", "key", prev.IdempotencyKey, "entity", prev.Entity, "wait", wait)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				c.fail(ctx.Err())
				return
			}
		}
	}
	a := c.e.actions[prev.Action]
	if a == nil {
		fin := prev
		c.finalize(&fin, connectors.Decision{Outcome: schemas.StatusUnresolved, Code: schemas.CodeUnknownAction,
			Message: fmt.Sprintf("inherited in_progress execution of action %q, which is no longer configured", prev.Action), Attempts: prev.Attempts}, version)
		c.add(emit{journal: &fin, outcome: &fin, causation: cmd.ID, replayed: cmd.ID != prev.Command.ID})
		return
	}
	rec := prev
	rec.Executor = c.e.cfg.ExecutorID
	c.run(ctx, a, rec, cmd.ID, cmd.ID != prev.Command.ID, version, func(ctx context.Context, req connectors.Request, opt connectors.PerformOption) connectors.Decision {
		req.Attempt = prev.Attempts
		if prev.Deadline != nil {
			req.Deadline = *prev.Deadline
		}
		return connectors.Reconcile(ctx, a.conn, req, a.policy, opt)
	})
}

type performFunc func(context.Context, connectors.Request, connectors.PerformOption) connectors.Decision

// run drives rec through perform, recording every attempt's intent first.
//
// keep, when given, decides whether a decision is recorded at all: the
// reconciler records only decisions that settle an unresolved record.
func (c *cycle) run(ctx context.Context, a *action, rec schemas.Record, causation string, replayed bool, version *int64, perform performFunc, keep ...func(connectors.Decision) bool) {
	p := rec.Command.Partition
	st := c.e.part(p)
	if st == nil {
		c.fail(errFenced)
		return
	}
	token := st.nextToken()
	rec.FencingToken = token
	req := connectors.Request{
		Action: rec.Action, Entity: rec.Entity, Key: rec.IdempotencyKey, Attempt: 1,
		FencingToken: token, Data: rec.Data, TraceParent: rec.TraceParent,
	}
	hook := connectors.WithBeforeExecute(func(ctx context.Context, attempt int, deadline time.Time) error {
		in := rec
		in.Status = schemas.StatusInProgress
		in.Attempts = attempt
		d := deadline.UTC()
		in.Deadline = &d
		in.Error, in.Result, in.FinishedAt = nil, nil, nil
		return c.iw.write(ctx, p, in)
	})
	select {
	case c.e.sem <- struct{}{}:
	case <-ctx.Done():
		c.fail(ctx.Err())
		return
	}
	start := time.Now()
	dec := perform(ctx, req, hook)
	<-c.e.sem
	c.e.m.duration.WithLabelValues(rec.Action, string(dec.Outcome)).Observe(time.Since(start).Seconds())
	if dec.Code == connectors.CodeNotStarted || dec.Code == connectors.CodeInterrupted {
		// No decision: the record stays in_progress in the journal with
		// its deadline, and the cycle aborts so the command is consumed
		// again by whoever owns the partition.
		c.fail(fmt.Errorf("key %q: %s: %s", rec.IdempotencyKey, dec.Code, dec.Message))
		return
	}
	if len(keep) > 0 && !keep[0](dec) {
		return
	}
	c.finalize(&rec, dec, version)
	c.add(emit{journal: &rec, outcome: &rec, causation: causation, replayed: replayed})
}

func (c *cycle) finalize(rec *schemas.Record, dec connectors.Decision, version *int64) {
	now := time.Now().UTC()
	rec.Status = dec.Outcome
	rec.Attempts = dec.Attempts
	rec.FinishedAt = &now
	rec.Deadline = nil
	rec.Result, rec.Error = nil, nil
	if dec.Outcome == schemas.StatusSucceeded {
		rec.Result = dec.Result
		*version++
	} else {
		rec.Error = &schemas.Error{Code: dec.Code, Message: dec.Message}
	}
	rec.EntityVersion = *version
	rec.Executor = c.e.cfg.ExecutorID
}

// resolve applies an operator's decision (onceflight resolve) to an
// unresolved or held record, and answers the control command itself.
func (c *cycle) resolve(cmd schemas.Command) {
	var req struct {
		Key    string `json:"key"`
		As     string `json:"as"`
		Reason string `json:"reason"`
		By     string `json:"by"`
	}
	if err := json.Unmarshal(cmd.Data, &req); err != nil || req.Key == "" || req.Reason == "" {
		c.reject(cmd, schemas.CodeInvalidCommand, "resolve needs data {\"key\",\"as\",\"reason\",\"by\"}", true)
		return
	}
	as := schemas.Status(req.As)
	if as != schemas.StatusSucceeded && as != schemas.StatusFailed && as != schemas.StatusRejected {
		c.reject(cmd, schemas.CodeInvalidCommand, fmt.Sprintf("resolve: --as %q, want succeeded, failed or rejected", req.As), true)
		return
	}
	target, found, err := c.lookup(req.Key)
	if err != nil {
		c.fail(err)
		return
	}
	if !found || (target.Status != schemas.StatusUnresolved && target.Status != schemas.StatusHeld) {
		st := "no record"
		if found {
			st = "status " + string(target.Status)
		}
		c.reject(cmd, schemas.CodeNotUnresolved, fmt.Sprintf("key %q cannot be resolved: %s (only unresolved or held records can)", req.Key, st), true)
		return
	}
	now := time.Now().UTC()
	res := target
	res.Status = as
	res.FinishedAt = &now
	res.Executor = c.e.cfg.ExecutorID
	res.Resolution = &schemas.Resolution{By: req.By, At: now, Reason: req.Reason, As: as}
	if as == schemas.StatusSucceeded {
		res.Error = nil
	} else if res.Error == nil {
		res.Error = &schemas.Error{Code: "resolved_by_operator", Message: req.Reason}
	}
	c.setFinal(res)
	c.add(emit{journal: &res, outcome: &res, causation: target.Command.ID})

	ctl := c.base(cmd)
	ctl.Status = schemas.StatusSucceeded
	ctl.Attempts = 1
	ctl.FinishedAt = &now
	ctl.Result, _ = json.Marshal(map[string]string{"resolved": req.Key, "as": req.As})
	c.add(emit{journal: &ctl, outcome: &ctl, causation: cmd.ID})
}

func (c *cycle) base(cmd schemas.Command) schemas.Record {
	return schemas.Record{
		IdempotencyKey: cmd.IdempotencyKey,
		Entity:         cmd.Subject,
		Action:         cmd.Type,
		Fingerprint:    cmd.Fingerprint,
		Command:        schemas.CommandRef{ID: cmd.ID, Source: cmd.Source, Partition: cmd.Partition, Offset: cmd.Offset},
		Executor:       c.e.cfg.ExecutorID,
		TraceParent:    cmd.TraceParent,
	}
}

// reject answers cmd with a rejected record. journal=false leaves the
// key's existing record untouched (a reused key must not overwrite it).
func (c *cycle) reject(cmd schemas.Command, code, msg string, journal bool) {
	now := time.Now().UTC()
	rec := c.base(cmd)
	rec.Status = schemas.StatusRejected
	rec.FinishedAt = &now
	rec.Error = &schemas.Error{Code: code, Message: msg}
	e := emit{outcome: &rec, causation: cmd.ID}
	if journal {
		e.journal = &rec
	}
	c.add(e)
}

func (c *cycle) replay(cmd schemas.Command, prev schemas.Record) {
	ret := c.e.retention
	if prev.FinishedAt != nil && ret.keep > 0 && time.Since(*prev.FinishedAt) > ret.keep {
		c.reject(cmd, schemas.CodeKeyExpired, fmt.Sprintf("idempotency key %q finished at %s, beyond dedupe retention; its result was dropped",
			cmd.IdempotencyKey, prev.FinishedAt.Format(time.RFC3339)), false)
		return
	}
	c.e.m.replays.Inc()
	// The command that produced the record, consumed again after a
	// crash between commit and offset, is a republication: same outcome
	// id, and not marked replayed.
	c.add(emit{outcome: &prev, causation: cmd.ID, replayed: cmd.ID != prev.Command.ID})
}

// undecodable sends r to the deadletter topic and, when an entity can be
// read from it, answers it with a rejected outcome too (SPEC §3).
func (c *cycle) undecodable(r *kgo.Record, err error) {
	c.e.m.deadletters.Inc()
	var de *schemas.DecodeError
	reason := err.Error()
	ent := ""
	if errors.As(err, &de) {
		reason, ent = de.Reason, de.Entity
	}
	c.add(emit{deadletter: r, reason: reason})
	if ent == "" {
		return
	}
	now := time.Now().UTC()
	ref := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
	rec := schemas.Record{
		IdempotencyKey: "invalid/" + ref,
		Entity:         ent,
		Status:         schemas.StatusRejected,
		Command:        schemas.CommandRef{ID: ref, Partition: r.Partition, Offset: r.Offset},
		FinishedAt:     &now,
		Executor:       c.e.cfg.ExecutorID,
		Error:          &schemas.Error{Code: schemas.CodeInvalidCommand, Message: reason},
	}
	c.add(emit{outcome: &rec, causation: ref})
}

func (c *cycle) lookup(key string) (schemas.Record, bool, error) {
	c.mu.Lock()
	rec, ok := c.finals[key]
	c.mu.Unlock()
	if ok {
		return rec, true, nil
	}
	rec, ok, err := c.e.store.Lookup(key)
	if err != nil {
		return rec, false, fmt.Errorf("dedupe lookup %q: %w", key, err)
	}
	// Past key_memory a key is forgotten (SPEC §3): a command with it is
	// new work.
	if ok && rec.Status.Final() && rec.FinishedAt != nil && c.e.retention.memory > 0 &&
		time.Since(*rec.FinishedAt) > c.e.retention.memory {
		return schemas.Record{}, false, nil
	}
	return rec, ok, nil
}

// claim reserves a new key for the first fingerprint that uses it this
// cycle; commands of other entities reusing it are rejected.
func (c *cycle) claim(key, fp string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if have, ok := c.claims[key]; ok {
		return have == fp
	}
	c.claims[key] = fp
	return true
}

func (c *cycle) setFinal(rec schemas.Record) {
	c.mu.Lock()
	c.finals[rec.IdempotencyKey] = rec
	c.mu.Unlock()
}

func (c *cycle) add(e emit) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.journal != nil {
		c.finals[e.journal.IdempotencyKey] = *e.journal
	}
	c.emits = append(c.emits, e)
}

func (c *cycle) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.abort == nil {
		c.abort = err
	}
}

func (c *cycle) aborted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.abort != nil
}

// finish publishes the cycle in one transaction with the offsets, then
// updates Pebble. It returns an error only when the session must be
// recreated.
func (c *cycle) finish(ctx context.Context) error {
	e := c.e
	if c.abort != nil {
		e.log.Warn("cycle aborted; its commands will be consumed again", "reason", c.abort)
		if errors.Is(c.abort, errFenced) {
			e.m.fenced.WithLabelValues("cycle").Inc()
		}
		e.m.cycles.WithLabelValues("aborted").Inc()
		if err := c.sess.Begin(); err != nil {
			return fmt.Errorf("begin (abort): %w", err)
		}
		if _, err := c.sess.End(ctx, kgo.TryAbort); err != nil {
			return fmt.Errorf("abort: %w", err)
		}
		return nil
	}
	ob := outbox.NewBatch(outbox.Topics{
		Journal: e.cfg.Topics.Journal, Outcomes: e.cfg.Topics.Outcomes,
		Deadletter: e.cfg.Topics.Deadletter, Commands: e.cfg.Topics.Commands, Partitions: e.counts,
	})
	// Chain hashes in journal order, on copies of the partition state that
	// become real only if the transaction commits.
	chain := map[int32]string{}
	var journaled []schemas.Record
	for i := range c.emits {
		em := &c.emits[i]
		switch {
		case em.deadletter != nil:
			ob.Deadletter(em.deadletter, em.reason)
			continue
		case em.forward != nil:
			ob.Forward(em.forward, em.entity, em.to)
			continue
		}
		if em.journal != nil {
			p := em.journal.Command.Partition
			st := e.part(p)
			if st == nil {
				return c.abortNow(ctx, errFenced)
			}
			prev, ok := chain[p]
			if !ok {
				prev = st.lastHash
			}
			em.journal.Epoch = st.epoch
			em.journal.PrevHash = prev
			h, err := schemas.HashRecord(prev, *em.journal)
			if err != nil {
				return c.abortNow(ctx, err)
			}
			em.journal.Hash = h
			chain[p] = h
			if err := ob.Journal(p, *em.journal); err != nil {
				return c.abortNow(ctx, err)
			}
			journaled = append(journaled, *em.journal)
		}
		if em.outcome != nil {
			if err := ob.Outcome(*em.outcome, em.causation, em.replayed); err != nil {
				return c.abortNow(ctx, err)
			}
		}
	}
	e.m.outboxBacklog.Set(float64(ob.Len()))
	if err := c.sess.Begin(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	last, err := ob.Produce(ctx, c.sess.Client())
	if err != nil {
		e.log.Warn("cycle produce failed; aborting", "err", err)
		if _, err2 := c.sess.End(ctx, kgo.TryAbort); err2 != nil {
			return fmt.Errorf("abort after produce error: %w", err2)
		}
		e.m.cycles.WithLabelValues("aborted").Inc()
		return nil
	}
	committed, err := c.sess.End(ctx, kgo.TryCommit)
	if err != nil {
		return fmt.Errorf("end transaction: %w", err)
	}
	e.m.outboxBacklog.Set(0)
	if !committed {
		// A rebalance or a refused TxnOffsetCommit (we are a zombie):
		// nothing of this cycle is visible, offsets rewound.
		e.m.cycles.WithLabelValues("aborted").Inc()
		e.m.fenced.WithLabelValues("commit").Inc()
		e.log.Warn("cycle transaction aborted by the session (rebalance or fenced); commands will be consumed again")
		return nil
	}
	e.m.cycles.WithLabelValues("committed").Inc()
	for _, em := range c.emits {
		if em.outcome != nil {
			e.m.commands.WithLabelValues(em.outcome.Action, string(em.outcome.Status)).Inc()
		}
	}
	b := e.store.NewBatch()
	defer b.Close()
	for _, rec := range journaled {
		b.PutRecord(rec)
	}
	for p, h := range chain {
		st := e.part(p)
		if st == nil {
			continue
		}
		st.lastHash = h
		if off, ok := last[p]; ok {
			st.next = off + 1
		}
		b.SetProgress(p, st.progress())
	}
	if err := b.Commit(); err != nil {
		// The journal has it; the next restore rebuilds Pebble.
		return fmt.Errorf("pebble commit after transaction: %w", err)
	}
	for _, rec := range journaled {
		if rec.Status == schemas.StatusUnresolved || rec.Resolution != nil {
			e.refreshUnresolved()
			break
		}
	}
	return nil
}

func (c *cycle) abortNow(ctx context.Context, cause error) error {
	c.abort = cause
	return c.finish(ctx)
}
