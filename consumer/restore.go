package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/outbox"
	"github.com/onceflight/onceflight/schemas"
)

// restore makes Pebble a faithful cache of journal partition p and takes
// ownership of it with a new epoch:
//
//  1. catch up from the last journal offset Pebble holds (incremental; 0
//     for a new or deleted data dir) through the high watermark, waiting
//     for open transactions there to end;
//  2. write an epoch marker one higher than any epoch seen;
//  3. catch up again through the marker, which also picks up anything a
//     previous owner committed between 1 and 2.
//
// Records written after a marker under a lower epoch come from an owner
// that was already replaced (a zombie's intent write that lost the race);
// catch-up skips them, so they never count as history.
func (e *Executor) restore(ctx context.Context, cl *kgo.Client, p int32) (*partState, error) {
	start := time.Now()
	// A restarted executor keeps its transactional id: loading the
	// producer id now aborts the transaction its previous incarnation left
	// open, instead of waiting for it to time out below.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		e.log.Warn("init producer id before restore", "err", err)
	}
	prog, err := e.store.Progress(p)
	if err != nil {
		return nil, fmt.Errorf("restore partition %d: %w", p, err)
	}
	// Through the high watermark, not just the stable offset: an epoch
	// marker behind a previous owner's open transaction would otherwise be
	// missed, and two owners could share an epoch.
	hwm, err := e.journalEnd(ctx, p)
	if err != nil {
		return nil, err
	}
	cu, err := e.catchUp(ctx, p, prog, hwm)
	if err != nil {
		return nil, err
	}
	epoch := cu.Epoch + 1
	marker := outbox.NewBatch(outbox.Topics{Journal: e.cfg.Topics.Journal})
	marker.Epoch(p, epoch, e.cfg.ExecutorID)
	last, err := marker.Produce(ctx, e.plain)
	if err != nil {
		return nil, fmt.Errorf("restore partition %d: epoch marker: %w", p, err)
	}
	cu, err = e.catchUp(ctx, p, cu, last[p]+1)
	if err != nil {
		return nil, err
	}
	if cu.Epoch != epoch {
		return nil, fmt.Errorf("restore partition %d: epoch %d written but %d read back: another owner is writing", p, epoch, cu.Epoch)
	}
	e.log.Info("partition restored", "partition", p, "epoch", cu.Epoch, "journal_offset", cu.JournalOffset, "took", time.Since(start))
	return newPartState(p, cu.Epoch, cu.LastHash, cu.JournalOffset), nil
}

// journalEnd is the high watermark of journal partition p.
func (e *Executor) journalEnd(ctx context.Context, p int32) (int64, error) {
	ends, err := kadm.NewClient(e.plain).ListEndOffsets(ctx, e.cfg.Topics.Journal)
	if err != nil {
		return 0, fmt.Errorf("restore partition %d: list end offsets: %w", p, err)
	}
	end, ok := ends.Lookup(e.cfg.Topics.Journal, p)
	if !ok || end.Err != nil {
		return 0, fmt.Errorf("restore partition %d: no end offset: %v", p, end.Err)
	}
	return end.Offset, nil
}

// catchUp applies journal partition p from prog.JournalOffset through
// offset target-1 and returns the new progress, which it also stores. It
// reads committed data only, so it waits for open transactions below target
// to end (bounded by the transaction timeout, plus a margin).
func (e *Executor) catchUp(ctx context.Context, p int32, prog dedupe.Progress, target int64) (dedupe.Progress, error) {
	if prog.JournalOffset >= target {
		return prog, nil
	}
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(e.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			e.cfg.Topics.Journal: {p: kgo.NewOffset().At(prog.JournalOffset)},
		}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records show where transactions ended, so the reader
		// sees an offset at or past every transaction's end, and knows
		// it reached target even when the tail is a commit marker.
		kgo.KeepControlRecords(),
	}, e.opts...)...)
	if err != nil {
		return prog, fmt.Errorf("catch up partition %d: %w", p, err)
	}
	defer rd.Close()

	wctx, cancel := context.WithTimeout(ctx, e.cfg.TransactionTimeout+20*time.Second)
	defer cancel()
	b := e.store.NewBatch()
	defer func() { b.Close() }()
	n := 0
	flush := func() error {
		b.SetProgress(p, prog)
		if err := b.Commit(); err != nil {
			return fmt.Errorf("catch up partition %d: %w", p, err)
		}
		b.Close()
		b = e.store.NewBatch()
		n = 0
		return nil
	}
	for prog.JournalOffset < target {
		fetches := rd.PollFetches(wctx)
		if wctx.Err() != nil {
			return prog, fmt.Errorf("catch up partition %d: reached offset %d of %d: %w", p, prog.JournalOffset, target, wctx.Err())
		}
		for _, r := range fetches.Records() {
			prog.JournalOffset = r.Offset + 1
			if r.Attrs.IsControl() {
				continue
			}
			e.applyJournal(b, r, &prog)
			if n++; n >= 1000 {
				if err := flush(); err != nil {
					return prog, err
				}
			}
		}
	}
	return prog, flush()
}

// applyJournal applies one journal record to the batch and progress.
func (e *Executor) applyJournal(b *dedupe.Batch, r *kgo.Record, prog *dedupe.Progress) {
	kind, epochHdr := "", int64(-1)
	for _, h := range r.Headers {
		switch h.Key {
		case outbox.HeaderKind:
			kind = string(h.Value)
		case outbox.HeaderEpoch:
			epochHdr, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	switch kind {
	case outbox.KindEpoch:
		var m struct {
			Epoch int64 `json:"epoch"`
		}
		if err := json.Unmarshal(r.Value, &m); err == nil && m.Epoch > prog.Epoch {
			prog.Epoch = m.Epoch
		} else if epochHdr > prog.Epoch {
			prog.Epoch = epochHdr
		}
	case outbox.KindRecord:
		rec, err := schemas.UnmarshalRecord(r.Value)
		if err != nil {
			e.log.Error("journal: undecodable record skipped", "partition", r.Partition, "offset", r.Offset, "err", err)
			return
		}
		if rec.Epoch < prog.Epoch {
			e.log.Warn("journal: record of a replaced owner ignored", "key", rec.IdempotencyKey, "epoch", rec.Epoch, "current_epoch", prog.Epoch, "offset", r.Offset)
			return
		}
		b.PutRecord(rec)
		prog.LastHash = rec.Hash
	}
}
