package consumer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// Reading past a hot entity (docs/memory.md, "A hot entity").
//
// An entity runs its commands one at a time (single flight), so one entity
// with a backlog of thousands drains slowly whatever the machine. Holding
// that backlog would take memory without bound, and pausing the partition
// (what the pipeline did before) stopped every other entity of the
// partition behind it. Instead, once an entity holds MaxBufferedPerEntity
// commands, its later commands are skipped: the poll loop keeps only their
// offsets (8 bytes each) and goes on with the partition. When the entity's
// worker has run what it holds, it reads the skipped commands again from
// Kafka by offset (refill), at most MaxBufferedPerEntity at a time, and
// runs them in order.
//
// What does not change:
//   - order and single flight: an entity's commands are items then skipped
//     offsets, in offset order, and once one is skipped every later one is
//     skipped too, so its worker runs them in partition order;
//   - the watermark: a skipped command's offset is tracked when it is
//     first consumed and marked answered only when its answer is staged,
//     so the partition's committed offset never passes it; a restart or a
//     new owner consumes it again from there;
//   - memory: the offsets are bounded by MaxSkippedPerPartition per
//     partition (past it the partition's fetching pauses), and a refill
//     holds one fetch of MaxFetchBytes at a time for the whole process
//     (refetchSem).

// skip remembers a command of a hot entity by its offset (p.mu held).
func (p *pipeline) skip(st *partState, q *entityQueue, off int64) {
	a := q.side()
	a.skipped = append(a.skipped, off)
	st.buf.skipped++
	p.mu.skipped++
	p.e.m.hw.skipped.raise(p.mu.skipped)
	p.checkPause(st)
}

// unskip takes n skipped commands out of the counts (p.mu held).
func (p *pipeline) unskip(st *partState, n int) {
	st.buf.skipped -= n
	p.mu.skipped -= n
	p.checkPause(st)
}

// refill reads the first skipped commands of entity again and queues them
// as items. The worker calls it with the queue's items empty; commands
// dispatched meanwhile are skipped (q.aside.skipped is not empty), so they stay
// after the refilled ones.
func (p *pipeline) refill(ctx context.Context, entity string, st *partState) error {
	p.mu.Lock()
	if !p.waitRefillRoom(ctx, st) {
		p.mu.Unlock()
		return ctx.Err() // nil: stopping, lost or draining, which runEntity sees
	}
	q := p.mu.queues[entity]
	offs := slices.Clone(q.aside.skipped[:min(len(q.aside.skipped), p.e.cfg.MaxBufferedPerEntity)])
	p.mu.Unlock()
	recs, err := p.refetch(ctx, st, offs)
	if err != nil {
		return err
	}
	items := make([]*item, 0, len(recs))
	for _, r := range recs {
		cmd, err := schemas.DecodeCommand(r, p.e.cfg.MaxDataBytes)
		if err != nil {
			return fmt.Errorf("skipped command at offset %d read again: %w", r.Offset, err)
		}
		if cmd.Subject != entity {
			return fmt.Errorf("skipped command at offset %d read again is of entity %q, not %q", r.Offset, cmd.Subject, entity)
		}
		items = append(items, newItem(r, cmd))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	q.aside.skipped = q.aside.skipped[len(offs):]
	if len(q.aside.skipped) == 0 {
		q.aside.skipped = nil // let the array go
	}
	p.unskip(st, len(offs))
	for _, it := range items {
		p.mu.buffered++
		p.enqueue(st, q, it)
	}
	p.checkPause(st)
	p.e.m.skipRefills.Inc()
	return nil
}

// waitRefillRoom waits, p.mu held, while the commands held (buffered and
// staged) are at their bounds (full), as the poll loop does before a poll
// (waitRoom): a refill is read into memory as a poll is. Without it a hot
// entity refilled as soon as it had run what it held, whatever the
// committer had not yet settled, and with the committer behind (or the
// brokers refusing transactions) its answers piled up to the staged bytes
// bound, past --max-buffered (TestRefillWaitsForRoom). It reports false,
// without waiting longer, when the pipeline stops, st ends or drains, or
// ctx ends: there is nothing to refill for. The worker waits for the
// committer only (memory.go's wait order), holding its entity's single
// flight and nothing else: its queue is empty.
func (p *pipeline) waitRefillRoom(ctx context.Context, st *partState) bool {
	end := func() bool { return p.mu.stopping || st.lost.Load() || st.draining.Load() || ctx.Err() != nil }
	if !p.full() || end() {
		return !end()
	}
	// context.AfterFunc runs its function on a goroutine of its own:
	// registering and stopping it under p.mu is safe (waitStaged).
	defer p.wakeOnDone(ctx)()
	if refillWaitHook != nil {
		refillWaitHook()
	}
	for p.full() && !end() {
		p.room.Wait()
	}
	return !end()
}

// refillWaitHook, when set (tests only), is called by a worker that begins
// to wait for room before a refill.
var refillWaitHook func()

// refetchBytes is a refill's fetch size for the partition: about what the
// offsets from the first to the last of offs hold, at refetchRecordBytes a
// record, between refetchMinBytes and max(maxMessage, 1 MiB). A hot
// entity's skipped commands are mostly a contiguous run, and a fetch of
// --max-message-bytes (4 MiB) read the rest of its backlog (~10 000
// records) to keep 50 of them: TestHotEntityDoesNotBlockItsPartition's
// 200 refills took 15 s that way and 4–11 s sized so (load 12). A fetch
// too small only costs another poll: Kafka returns at least one batch
// whatever the size (KIP-74).
func refetchBytes(offs []int64, maxMessage int) int32 {
	most := int64(max(maxMessage, 1<<20))
	if span := offs[len(offs)-1] - offs[0] + 1; span < most/refetchRecordBytes {
		return int32(max(span*refetchRecordBytes, refetchMinBytes))
	}
	return int32(most)
}

const (
	refetchRecordBytes = 1 << 10
	refetchMinBytes    = 64 << 10
)

// refetch reads the command records at offs (ascending) of partition st.p
// with a reader of its own, committed data only. The records between them
// (other entities') are read and dropped. One refetch runs at a time in
// the process, which bounds what its reader holds to one fetch.
func (p *pipeline) refetch(ctx context.Context, st *partState, offs []int64) ([]*kgo.Record, error) {
	select {
	case p.e.refetchSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.e.refetchSem }()
	cfg := &p.e.cfg
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			cfg.Topics.Commands: {st.p: kgo.NewOffset().At(offs[0])},
		}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxPartitionBytes(refetchBytes(offs, cfg.MaxMessageBytes)),
		kgo.FetchMaxBytes(int32(cfg.MaxFetchBytes)),
		kgo.MaxConcurrentFetches(1),
	}, p.e.opts...)...)
	if err != nil {
		return nil, fmt.Errorf("read skipped commands of partition %d: reader: %w", st.p, err)
	}
	defer rd.Close()
	// The skipped commands were read committed once: they are there, and
	// only a broker that stops answering makes this wait; bounded like a
	// journal catch-up.
	wctx, cancel := context.WithTimeout(ctx, cfg.TransactionTimeout+20*time.Second)
	defer cancel()
	out := make([]*kgo.Record, 0, len(offs))
	for len(out) < len(offs) {
		fs := rd.PollFetches(wctx)
		if wctx.Err() != nil {
			return nil, fmt.Errorf("read skipped commands of partition %d: %d of %d read from offset %d: %w", st.p, len(out), len(offs), offs[0], wctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) {
			p.e.log.Warn("read skipped commands: fetch error", "partition", st.p, "err", err)
		})
		var gone error
		fs.EachRecord(func(r *kgo.Record) {
			if gone != nil || len(out) == len(offs) {
				return
			}
			want := offs[len(out)]
			switch {
			case r.Offset < want:
			case r.Offset == want:
				out = append(out, r)
			default:
				gone = fmt.Errorf("read skipped commands of partition %d: offset %d is no longer in %s (deleted by retention?)", st.p, want, cfg.Topics.Commands)
			}
		})
		if gone != nil {
			return nil, gone
		}
	}
	return out, nil
}
