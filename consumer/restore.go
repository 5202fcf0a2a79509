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
//     for a new or deleted data dir) to the last stable offset;
//  2. write an epoch marker one higher than any epoch seen;
//  3. catch up again through the marker, which also picks up anything a
//     previous owner committed between 1 and 2.
//
// Records written after a marker under a lower epoch come from an owner
// that was already replaced (a zombie's intent write that lost the race);
// catch-up skips them, so they never count as history.
func (e *Executor) restore(ctx context.Context, p int32) (*partState, error) {
	start := time.Now()
	prog, err := e.store.Progress(p)
	if err != nil {
		return nil, fmt.Errorf("restore partition %d: %w", p, err)
	}
	cu, err := e.catchUp(ctx, p, prog)
	if err != nil {
		return nil, err
	}
	epoch := cu.Epoch + 1
	marker := outbox.NewBatch(outbox.Topics{Journal: e.cfg.Topics.Journal})
	marker.Epoch(p, epoch, e.cfg.ExecutorID)
	if _, err := marker.Produce(ctx, e.plain); err != nil {
		return nil, fmt.Errorf("restore partition %d: epoch marker: %w", p, err)
	}
	cu, err = e.catchUp(ctx, p, cu)
	if err != nil {
		return nil, err
	}
	e.log.Info("partition restored", "partition", p, "epoch", cu.Epoch, "journal_offset", cu.JournalOffset, "took", time.Since(start))
	return &partState{epoch: cu.Epoch, lastHash: cu.LastHash, next: cu.JournalOffset}, nil
}

// catchUp applies journal partition p from prog.JournalOffset up to its last
// stable offset and returns the new progress, which it also stores.
func (e *Executor) catchUp(ctx context.Context, p int32, prog dedupe.Progress) (dedupe.Progress, error) {
	adm := kadm.NewClient(e.plain)
	ends, err := adm.ListCommittedOffsets(ctx, e.cfg.Topics.Journal)
	if err != nil {
		return prog, fmt.Errorf("catch up partition %d: list offsets: %w", p, err)
	}
	end, ok := ends.Lookup(e.cfg.Topics.Journal, p)
	if !ok || end.Err != nil {
		return prog, fmt.Errorf("catch up partition %d: no end offset: %v", p, end.Err)
	}
	if prog.JournalOffset >= end.Offset {
		return prog, nil
	}
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(e.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			e.cfg.Topics.Journal: {p: kgo.NewOffset().At(prog.JournalOffset)},
		}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records show where transactions ended, so the reader
		// knows when it reached the end even if the tail is a marker.
		kgo.KeepControlRecords(),
	}, e.opts...)...)
	if err != nil {
		return prog, fmt.Errorf("catch up partition %d: %w", p, err)
	}
	defer rd.Close()

	b := e.store.NewBatch()
	defer func() { b.Close() }()
	n, idle := 0, 0
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
	for prog.JournalOffset < end.Offset {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := rd.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return prog, ctx.Err()
		}
		recs := fetches.Records()
		if len(recs) == 0 {
			// An aborted transaction at the very tail leaves offsets
			// below the end that a read_committed reader never sees.
			// Nothing we must apply can hide there, so a few idle polls
			// mean we are caught up.
			if idle++; idle >= 3 {
				break
			}
			continue
		}
		idle = 0
		for _, r := range recs {
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
