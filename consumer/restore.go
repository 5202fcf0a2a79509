package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// errJournalGap means the journal no longer holds records this executor
// has not read and that may still matter: restoring past them could
// execute a remembered key again. The partition is held, not processed.
var errJournalGap = errors.New("journal gap")

// errJournalBehind means the journal ends before the offset this
// executor's state has read it to: the state is not a cache of the
// journal as it is now. The partition is held, not processed.
var errJournalBehind = errors.New("journal behind the data dir")

// restore makes Pebble a faithful cache of journal partition p and takes
// ownership of it with a new epoch:
//
//  1. take the journal's bounds (read once per assignment). If the log
//     starts after the last offset Pebble holds, records were deleted
//     unread: accepted only when they are older than key_memory (time
//     retention did it), else the partition is held (errJournalGap);
//  2. catch up through the high watermark, waiting for open transactions
//     there to end;
//  3. write an epoch marker, fenced like every journal write: it goes
//     through the committer's transaction, whose TxnOffsetCommit carries
//     the generation the assignment belongs to, so a restore that outlived
//     its assignment writes nothing visible;
//  4. catch up again through the marker and check it reads back.
//
// Epochs never go backwards, even when retention deleted every earlier
// marker: a new epoch is above every epoch restore read (markers and
// records) and above the journal's end offset, and offsets never repeat.
// Every epoch is chosen this way, so each is at most its marker's offset+1,
// and a later owner, which reads a later end offset, picks a larger one.
func (e *Executor) restore(ctx context.Context, cl *kgo.Client, as *assignment, p int32) (*partState, error) {
	if restoreHook != nil {
		defer restoreHook(p)()
	}
	start := time.Now()
	prog, err := e.store.Progress(p)
	if err != nil {
		return nil, fmt.Errorf("restore partition %d: %w", p, err)
	}
	// Through the high watermark, not just the stable offset: an epoch
	// marker behind a previous owner's open transaction would otherwise be
	// missed.
	lo, hi, err := as.journalBounds(p)
	if err != nil {
		return nil, err
	}
	// Nothing of p in the store yet (a new data dir, or a partition it
	// never owned: every owned partition has a Progress): the catch-up's
	// batches skip reading the previous version of keys it has not
	// written itself (dedupe.Fresh).
	var fresh *dedupe.Fresh
	if prog == (dedupe.Progress{}) {
		fresh = dedupe.NewFresh(hi - lo)
	}
	if prog.JournalOffset > hi {
		// Records reach the state only once they are in the journal,
		// under its high watermark: this journal lost them, or it is
		// another one under the same name (deleted and created again
		// where the brokers give no topic ids: dedupe.BindJournal). Read
		// on, the restore would find nothing to read, and its own marker
		// would read back as another owner's.
		return nil, fmt.Errorf("%w: journal %s partition %d ends at offset %d, but this executor's state (%s) has read it to offset %d: the journal lost records (an unclean leader election, a truncation) or was deleted and created again. The partition is held: the state may hold records the journal does not. To go on from the journal as it is, move the data dir aside (it is rebuilt from the journal; keys only the lost records held may execute again)",
			errJournalBehind, e.cfg.Topics.Journal, p, hi, e.cfg.DataDir, prog.JournalOffset)
	}
	gap := prog.JournalOffset < lo
	if gap {
		e.log.Warn("journal records deleted before this executor read them; checking their age", "partition", p,
			"state_offset", prog.JournalOffset, "log_start", lo, "log_end", hi)
		prog.JournalOffset = lo
	}
	rd, err := e.journalReader(p, prog.JournalOffset)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	cu, err := e.catchUp(ctx, rd, p, prog, hi, gap, fresh)
	if err != nil {
		return nil, err
	}
	epoch := max(cu.Epoch+1, hi+1)
	fence, err := as.fenceOffset(p)
	if err != nil {
		return nil, err
	}
	pipe, err := e.waitPipeline(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("restore partition %d: %w", p, err)
	}
	off, err := pipe.cm.marker(ctx, p, epoch, fence, as.member)
	if err != nil {
		return nil, fmt.Errorf("restore partition %d: epoch marker: %w", p, err)
	}
	cu, err = e.catchUp(ctx, rd, p, cu, off+1, false, fresh)
	if err != nil {
		return nil, err
	}
	if cu.Epoch < epoch {
		// Our own marker is not in the journal although its transaction
		// was reported committed: it was aborted (under load, franz-go's
		// EndTransaction ended a new client's first transaction as an
		// abort and returned nil, BENCHMARKS.md round 25 (ckpt)). Not
		// another owner: this ownership never began.
		// Its checkpoint tree is not published (markerReadBack is not
		// called), and the new client the rejoin makes restores again.
		return nil, fmt.Errorf("restore partition %d: epoch %d written, but its marker is not in the journal read back to the end of its transaction (offset %d; epoch %d read): the transaction that was reported committed was aborted", p, epoch, off, cu.Epoch)
	}
	if cu.Epoch != epoch {
		return nil, fmt.Errorf("restore partition %d: epoch %d written but %d read back: another owner is writing", p, epoch, cu.Epoch)
	}
	e.cp.markerReadBack(p, epoch)
	e.log.Info("partition restored", "partition", p, "epoch", cu.Epoch, "journal_offset", cu.JournalOffset, "took", time.Since(start))
	st := newPartState(p, cu)
	st.start = fence
	return st, nil
}

// waitPipeline returns the pipeline of client cl. The group can assign
// partitions before the poll loop has published it; a pipeline of another
// client (a callback of a client being closed) is never returned, since its
// transactions carry another membership.
func (e *Executor) waitPipeline(ctx context.Context, cl *kgo.Client) (*pipeline, error) {
	for {
		if p := e.pipe.Load(); p != nil && p.cl == cl {
			return p, nil
		}
		if e.closing.Load() == cl {
			return nil, errFenced
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// assignment is what the restores of one assignment read from the broker
// once, instead of once per partition: the journal's bounds and the group's
// committed offsets.
type assignment struct {
	e *Executor
	// member is the group member id the assignment was made to: the
	// epoch markers of its restores are committed only under it.
	member         string
	starts, ends   kadm.ListedOffsets
	committed      kadm.OffsetResponses
	commandsStarts kadm.ListedOffsets
}

func (e *Executor) loadAssignment(ctx context.Context) (*assignment, error) {
	adm := kadm.NewClient(e.plain)
	as := &assignment{e: e}
	var err error
	if as.ends, err = adm.ListEndOffsets(ctx, e.cfg.Topics.Journal); err != nil {
		return nil, fmt.Errorf("restore: list journal end offsets: %w", err)
	}
	if as.starts, err = adm.ListStartOffsets(ctx, e.cfg.Topics.Journal); err != nil {
		return nil, fmt.Errorf("restore: list journal start offsets: %w", err)
	}
	if as.committed, err = adm.FetchOffsets(ctx, e.cfg.Group); err != nil {
		return nil, fmt.Errorf("restore: fetch committed offsets: %w", err)
	}
	if as.commandsStarts, err = adm.ListStartOffsets(ctx, e.cfg.Topics.Commands); err != nil {
		return nil, fmt.Errorf("restore: list command start offsets: %w", err)
	}
	return as, nil
}

// journalBounds is the log start and high watermark of journal partition
// p, read when the assignment began (before any of its markers).
func (as *assignment) journalBounds(p int32) (lo, hi int64, err error) {
	t := as.e.cfg.Topics.Journal
	end, ok := as.ends.Lookup(t, p)
	if !ok || end.Err != nil {
		return 0, 0, fmt.Errorf("restore partition %d: journal %s has no partition %d (partition counts differ?): %v", p, t, p, end.Err)
	}
	st, ok := as.starts.Lookup(t, p)
	if !ok || st.Err != nil {
		return 0, 0, fmt.Errorf("restore partition %d: no start offset: %v", p, st.Err)
	}
	return st.Offset, end.Offset, nil
}

// fenceOffset is the offset the marker's transaction commits for commands
// partition p: the group's committed offset (or the log start when there
// is none, where franz-go would start too). Committing it changes nothing
// for the owner and is refused for anyone else.
func (as *assignment) fenceOffset(p int32) (int64, error) {
	t := as.e.cfg.Topics.Commands
	if o, ok := as.committed.Lookup(t, p); ok && o.Err == nil && o.At >= 0 {
		return o.At, nil
	}
	st, ok := as.commandsStarts.Lookup(t, p)
	if !ok || st.Err != nil {
		return 0, fmt.Errorf("restore partition %d: commands %s has no partition %d: %v", p, t, p, st.Err)
	}
	return st.Offset, nil
}

// journalReader reads journal partition p from offset from, committed
// data only. Control records are kept: they show where transactions
// ended, so the reader sees an offset at or past every transaction's end
// and knows it reached its target even when the tail is a commit marker.
func (e *Executor) journalReader(p int32, from int64) (*kgo.Client, error) {
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(e.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			e.cfg.Topics.Journal: {p: kgo.NewOffset().At(from)},
		}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxPartitionBytes(int32(max(e.cfg.MaxMessageBytes, 1<<20))),
		kgo.KeepControlRecords(),
	}, e.opts...)...)
	if err != nil {
		return nil, fmt.Errorf("restore partition %d: journal reader: %w", p, err)
	}
	return rd, nil
}

// catchUp applies journal partition p from prog.JournalOffset (where rd is
// positioned) through offset target-1 and returns the new progress, which
// it also stores. It reads committed data only, so it waits for open transactions below target
// to end (bounded by the transaction timeout, plus a margin).
//
// afterGap says records before prog.JournalOffset were deleted unread: the
// first record read then tells their age (they are older than it).
//
// fresh, if not nil, is given to every batch (dedupe.Batch.UseFresh): the
// store held nothing of p when the restore began.
func (e *Executor) catchUp(ctx context.Context, rd *kgo.Client, p int32, prog dedupe.Progress, target int64, afterGap bool, fresh *dedupe.Fresh) (dedupe.Progress, error) {
	if prog.JournalOffset >= target {
		return prog, nil
	}

	wctx, cancel := context.WithTimeout(ctx, e.cfg.TransactionTimeout+20*time.Second)
	defer cancel()
	newBatch := func() *dedupe.Batch {
		// Sized for a full batch: its maps are not grown and rehashed
		// on the way to 4 000 records (a tenth of PutRecordBytes' CPU).
		b := e.store.NewBatchSize(batchRecords(fresh))
		if fresh != nil {
			b.UseFresh(fresh)
		}
		return b
	}
	b := newBatch()
	defer func() { b.Close() }()
	n, size := 0, 0 // records and journal value bytes in b
	// Only the catch-up's last batch is synced. Its batches hold records
	// the journal already holds and nothing has been answered from, so a
	// crash that loses some costs a replay, never a record: Pebble replays
	// its WAL as a prefix (recovery stops at the first missing or torn
	// chunk), so a batch lost takes every later one with it, and the
	// Progress in a batch that survived never names a record that did not
	// (dedupe.TestNoSyncBatchesKeepProgressBehindRecords). A sync per batch
	// was a wait on the disk every 1 000 records of every restore.
	//
	// Into a partition the store held nothing of (fresh), a full batch is
	// ingested as a sorted table instead (dedupe.Batch.CommitIngest): no
	// memtable, WAL or flush for records that only the journal produced,
	// and each batch durable when it returns. Such a catch-up never
	// commits without a sync: an ingestion is not ordered after unsynced
	// WAL writes, so an ingested Progress could outlive an earlier
	// unsynced batch's records.
	flush := func(sync bool) error {
		b.SetProgress(p, prog)
		commit := b.CommitNoSync
		switch {
		case fresh != nil && (n >= ingestMin || size >= restoreBatchBytes):
			commit = b.CommitIngest
		case sync || fresh != nil:
			commit = b.Commit
		}
		if err := commit(); err != nil {
			return fmt.Errorf("catch up partition %d: %w", p, err)
		}
		b.Close()
		b = newBatch()
		n, size = 0, 0
		return nil
	}
	// With signed transactions required, records reach the batch only
	// once a trusted seal covers them, and the progress moves only past
	// them: a restart never skips a record it held back.
	seed := prog
	if afterGap {
		// The chain went on in what retention deleted: the first
		// transaction after the gap starts it again.
		seed.SealNote = ""
	}
	gate, err := e.seals.gate(p, seed)
	if err != nil {
		return prog, err
	}
	if gate != nil && afterGap {
		// Retention may have cut a transaction: its surviving records
		// and its seal cannot be checked and are not applied (the gap
		// was accepted: they are older than key_memory, or an
		// operator accepted the loss).
		gate.StartsAfterGap()
		defer func() {
			if n := gate.Skipped(); n > 0 {
				e.log.Warn("journal gap: records before the first seal after it not applied (their transaction's signature covers deleted records)", "partition", p, "records", n)
			}
		}()
	}
	apply := func(r *kgo.Record) {
		e.applyJournal(b, r, &prog)
		prog.JournalOffset = r.Offset + 1
		n++
		size += len(r.Value)
	}
	if gate == nil && prog.SealNote != "" {
		// Seals are not checked now, so the one stored may not be the
		// last any more: a later run that checks them starts afresh
		// from its position rather than refusing the chain that went on
		// meanwhile as not following it.
		prog.SealNote, prog.SealOffset = "", 0
	}
	if gate != nil {
		// Seals pass the gate only once trusted: the last applied is
		// the one a later restore goes on after.
		applyRecord := apply
		apply = func(r *kgo.Record) {
			if wire.JournalKind(r) == schemas.KindSeal {
				prog.SealNote, prog.SealOffset = string(r.Value), r.Offset
			}
			applyRecord(r)
		}
	}
	// The records the gate holds waiting for a seal (a seal follows
	// the records it covers): bounded, see maxUnsealedRecords.
	unsealed, unsealedBytes := 0, 0
	for read := prog.JournalOffset; read < target; {
		fetches := rd.PollFetches(wctx)
		if wctx.Err() != nil {
			return prog, fmt.Errorf("catch up partition %d: reached offset %d of %d: %w", p, read, target, wctx.Err())
		}
		fetches.EachError(func(_ string, _ int32, err error) {
			e.log.Warn("catch up: fetch error", "partition", p, "err", err)
		})
		for _, r := range fetches.Records() {
			if afterGap {
				afterGap = false
				if err := e.gapAcceptable(p, r); err != nil {
					return prog, err
				}
			}
			read = r.Offset + 1
			switch {
			case r.Attrs.IsControl():
				if gate == nil || gate.Idle() {
					prog.JournalOffset = r.Offset + 1
				}
				continue
			case gate == nil:
				apply(r)
			default:
				if wire.JournalKind(r) == schemas.KindSeal {
					unsealed, unsealedBytes = 0, 0
				} else if unsealed, unsealedBytes = unsealed+1, unsealedBytes+len(r.Value); unsealed > maxUnsealedRecords || unsealedBytes > maxUnsealedBytes+2*e.cfg.MaxMessageBytes {
					return prog, e.unsignedHeld(p, fmt.Errorf("%w: %d journal records in a row without a seal (%d bytes, to offset %d): more than an executor's transaction writes, so not covered by a trusted executor signature", errUnsigned, unsealed, unsealedBytes, r.Offset))
				}
				if _, err := e.gated(gate, r, apply, gate.Sealed() >= 1000); err != nil {
					return prog, e.unsignedHeld(p, err)
				}
			}
			if n >= batchRecords(fresh) || size >= restoreBatchBytes {
				if err := flush(false); err != nil {
					return prog, err
				}
			}
		}
	}
	if gate != nil {
		if _, err := e.gated(gate, nil, apply, true); err != nil {
			return prog, e.unsignedHeld(p, err)
		}
		if err := gate.End(); err != nil {
			if ferr := flush(true); ferr != nil {
				return prog, ferr
			}
			return prog, e.unsignedHeld(p, fmt.Errorf("%w: %v", errUnsigned, err))
		}
	}
	return prog, flush(true)
}

// maxUnsealedRecords and maxUnsealedBytes bound the journal records a
// catch-up with signed transactions required holds in its seal gate
// waiting for a seal. A seal ends every transaction an executor writes,
// after at most maxFlushEntries entries (a few records each) and about
// maxFlushBytes (one entry may pass it alone, by up to a record of
// --max-message-bytes: the byte bound allows two), so a longer run is not
// an executor's: refused as it grows rather than held in memory to the
// journal's end, however many a writer without a key appended
// (TestRestoreRefusesAnUnsealedRunEarly).
const (
	maxUnsealedRecords = 8 * maxFlushEntries
	maxUnsealedBytes   = 8 * maxFlushBytes
)

// ingestRecords is a fresh catch-up's batch: a table per 4 000 journal
// records (about 4 MiB of values held per restoring partition until it
// is written). Tables of 1 000 were ingestions, flushes of the memtable
// they overlap and level-0 files four times as often.
//
// ingestRecords and ingestMin are variables only so that a test can make
// a small journal take the ingesting road (TestDataDirLossRestoresByIngest).
var ingestRecords = 4000

// ingestMin is the smallest batch a fresh catch-up ingests (its last one
// may be short): below it, a table and an ingestion cost more than the
// memtable saves, and the batch is committed with a sync instead.
var ingestMin = 256

// restoreBatchBytes bounds the journal values a catch-up's batch holds
// (with the fetched records they are slices of) before it is written,
// whatever its count: batchRecords assumes records of ~1 KB, and records
// of large commands (data up to --max-data-bytes) made a batch of 4 000
// the partition's whole journal, held by every restoring partition at
// once (TestRestoreBatchBoundedInBytes). Above a full batch of noop
// records (~4 MiB), so the common restore's batches do not change.
const restoreBatchBytes = 8 << 20

// batchRecords is how many records a catch-up collects per batch: 1 000
// through the memtable (more measured no better, BENCHMARKS.md round 7),
// ingestRecords into a fresh partition.
func batchRecords(fresh *dedupe.Fresh) int {
	if fresh != nil {
		return ingestRecords
	}
	return 1000
}

// unsignedHeld is the reason a partition is held for records no trusted
// signature covers; what was trusted before them stays applied.
func (e *Executor) unsignedHeld(p int32, err error) error {
	return fmt.Errorf("journal %s partition %d: %w. The partition is held and nothing is executed on their account; find who wrote them (docs/trust.md#threat-model) and remove them, e.g. by moving to a new journal", e.cfg.Topics.Journal, p, err)
}

// gapAcceptable decides whether deleted journal records before r could
// still matter. They are older than r (the journal is appended in time
// order); if r itself is older than key_memory, every key they held is
// forgotten anyway and the gap is the work of time retention.
func (e *Executor) gapAcceptable(p int32, r *kgo.Record) error {
	age := time.Since(r.Timestamp)
	if age >= e.retention.memory {
		e.log.Info("journal gap older than key_memory: accepted", "partition", p, "first_offset", r.Offset, "first_record_age", age)
		return nil
	}
	err := fmt.Errorf("%w: journal %s partition %d starts at offset %d, written %s ago, but this executor's state ends before it: deleted records may hold keys younger than key_memory (%s), and a repeat of one would execute again. The partition is held. Restore the journal's records, or accept the loss with --accept-journal-gap",
		errJournalGap, e.cfg.Topics.Journal, p, r.Offset, age.Round(time.Second), e.retention.memory)
	if e.cfg.AcceptJournalGap {
		e.log.Error("journal gap accepted by --accept-journal-gap", "partition", p, "err", err)
		return nil
	}
	return err
}

// applyJournal applies one journal record to the batch and progress. The
// epoch is the highest one read — from markers and from records, so it
// survives retention deleting the markers — and the token floor the
// highest fencing token read.
func (e *Executor) applyJournal(b *dedupe.Batch, r *kgo.Record, prog *dedupe.Progress) {
	switch wire.JournalKind(r) {
	case schemas.KindEpoch:
		m := wire.DecodeEpochMarker(r)
		if m.Partitions > 0 && m.Partitions != e.nPart {
			e.halt(fmt.Errorf("journal %s partition %d: epoch marker at offset %d was written with %d partitions, the topics now have %d: entities moved away from their records; new work stopped. Restore the partition count or move to new topics (see README, \"Partition counts are fixed\")",
				e.cfg.Topics.Journal, r.Partition, r.Offset, m.Partitions, e.nPart))
		}
		if m.Epoch > prog.Epoch {
			prog.Epoch = m.Epoch
		}
	case schemas.KindRecord:
		// Only what the index reads: the value itself is what is stored.
		rec, err := schemas.UnmarshalRecordIndex(r.Value)
		if err != nil {
			e.log.Error("journal: undecodable record skipped", "partition", r.Partition, "offset", r.Offset, "err", err)
			return
		}
		if rec.Epoch < prog.Epoch {
			e.log.Warn("journal: record of a replaced owner ignored", "key", rec.IdempotencyKey, "epoch", rec.Epoch, "current_epoch", prog.Epoch, "offset", r.Offset)
			return
		}
		prog.Epoch = rec.Epoch
		if rec.FencingToken > prog.TokenSeq {
			prog.TokenSeq = rec.FencingToken
		}
		// The journal value is stored as it is: no second encoding.
		b.PutRecordBytes(rec, r.Value)
		prog.LastHash = rec.Hash
	}
}

// restoreHook, when set (tests only), is called as a partition's restore
// begins; the function it returns is called when that restore ends.
var restoreHook func(p int32) (done func())
