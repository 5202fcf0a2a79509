package consumer

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/outbox"
	"github.com/onceflight/onceflight/schemas"
)

// intentWriter group-commits in_progress records from the entity goroutines
// of one cycle: each flush is one short transaction (no offsets) followed by
// a membership check, so an attempt is sent only after
//
//   - its intent is committed and readable by any later owner's restore, and
//   - this process was still a member of the generation that owns the
//     partition after that commit (checkMember explains why that is enough).
//
// A zombie fails the check and sends nothing; its intent, if it landed after
// a newer epoch marker, is ignored by restore.
type intentWriter struct {
	e  *Executor
	cl *kgo.Client
	ch chan *intentReq
}

type intentReq struct {
	p    int32
	rec  schemas.Record
	done chan error
}

func newIntentWriter(e *Executor, cl *kgo.Client) *intentWriter {
	return &intentWriter{e: e, cl: cl, ch: make(chan *intentReq)}
}

// write records rec as the partition's next journal entry and returns once
// it is durable and ownership was re-proven, or with the reason it is not.
func (w *intentWriter) write(ctx context.Context, p int32, rec schemas.Record) error {
	req := &intentReq{p: p, rec: rec, done: make(chan error, 1)}
	select {
	case w.ch <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *intentWriter) loop(ctx context.Context) {
	for {
		var batch []*intentReq
		select {
		case r := <-w.ch:
			batch = append(batch, r)
		case <-ctx.Done():
			return
		}
	drain:
		for len(batch) < 4096 {
			select {
			case r := <-w.ch:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		err := w.flush(ctx, batch)
		for _, r := range batch {
			r.done <- err
		}
	}
}

func (w *intentWriter) flush(ctx context.Context, batch []*intentReq) error {
	e := w.e
	ob := outbox.NewBatch(outbox.Topics{Journal: e.cfg.Topics.Journal})
	chain := map[int32]string{}
	recs := make([]schemas.Record, 0, len(batch))
	for _, r := range batch {
		st := e.part(r.p)
		if st == nil || st.lost.Load() {
			e.m.fenced.WithLabelValues("intent").Inc()
			return errFenced
		}
		prev, ok := chain[r.p]
		if !ok {
			prev = st.lastHash
		}
		r.rec.Epoch = st.epoch
		r.rec.PrevHash = prev
		h, err := schemas.HashRecord(prev, r.rec)
		if err != nil {
			return err
		}
		r.rec.Hash = h
		chain[r.p] = h
		if err := ob.Journal(r.p, r.rec); err != nil {
			return err
		}
		recs = append(recs, r.rec)
	}
	if err := w.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("intent: begin: %w", err)
	}
	last, err := ob.Produce(ctx, w.cl)
	if err != nil {
		_ = w.cl.EndTransaction(ctx, kgo.TryAbort)
		return fmt.Errorf("intent: %w", err)
	}
	if err := w.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("intent: commit: %w", err)
	}
	// The intents are in the journal now, whatever happens next: advance
	// the chain even if the membership check fails.
	b := e.store.NewBatch()
	defer b.Close()
	for _, rec := range recs {
		b.PutRecord(rec)
	}
	for p, h := range chain {
		if st := e.part(p); st != nil {
			st.lastHash = h
			st.next = last[p] + 1
			b.SetProgress(p, st.progress())
		}
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("intent: pebble: %w", err)
	}
	for p := range chain {
		if err := e.checkMember(ctx, w.cl, p); err != nil {
			e.m.fenced.WithLabelValues("intent").Inc()
			e.log.Warn("ownership lost after recording intent; not executing", "partition", p, "err", err)
			return err
		}
	}
	return nil
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
