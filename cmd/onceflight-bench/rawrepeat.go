package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// rawRepeatResult is one run of the design-minimal pipeline of a repeat.
type rawRepeatResult struct {
	rawResult
	passes     int   // over the index, each reopened cold
	keys       int   // records in the index
	valueBytes int64 // of their stored values, together
}

// runRawRepeat runs the floor of a repeat, the raw pipeline's counterpart
// of the repeats phase, on the same broker: n commands (encoded exactly as
// the executor's backlog is, the same keys and entities as the phases'
// with or without -random-keys) on a topic of b.partitions partitions,
// whose n records are first written to an index (before the clock: read
// once, in batches of a transaction's size, as the executor phase wrote
// them), which is
// then closed and opened again, as the repeats phase opens the executor's
// (its block cache empty); then, timed, the same n commands consumed again,
// and per poll: the inputs' idempotency keys found in their values (no
// decode), their records read in key order through one iterator (the
// executor's own read-ahead, dedupe.Store.Prefetch, on a store opened with
// the executor's options: MinLZ tables, bloom filters, value separation,
// the default cache and memtables), one outcome-like record per input
// carrying the value read, and one Kafka transaction that commits the
// consumed offsets (transactLoop). No Pebble write: a transaction of
// repeats writes none in serve either (its Progress does not move).
//
// The inputs are looked up once each, as the repeats phase sends each
// final key once: a store of the repeats phase's size, read cold. passes
// such runs (the topic consumed again by a new group, the store reopened
// cold before each) are added up: one pass of 50 000 inputs is ~0.3 s of
// CPU, short enough for one garbage collection more or less, or a
// neighbour's burst, to move it by half.
func (b *bench) runRawRepeat(ctx context.Context, n, maxPoll, passes int) (rawRepeatResult, error) {
	in, out := b.prefix+"rawrepeat.in", b.prefix+"rawrepeat.outcomes"
	for _, t := range []string{in, out} {
		if err := createTopic(ctx, b.adm, t, b.partitions, nil); err != nil {
			return rawRepeatResult{}, err
		}
	}
	if err := b.produceBacklog(ctx, cmdSpec{action: "bench.noop", idPrefix: "rawr", keyPrefix: "rrk", n: n}, in); err != nil {
		return rawRepeatResult{}, err
	}
	dir := filepath.Join(b.dir, "rawrepeat-index")
	defer os.RemoveAll(dir)
	f, err := openRepeatFloor(dir, b.prefix+"executor", b.data)
	if err != nil {
		return rawRepeatResult{}, err
	}
	defer func() { _ = f.close() }()
	if err := b.populateFloor(ctx, f, in, n); err != nil {
		return rawRepeatResult{}, err
	}
	res := rawRepeatResult{keys: f.stored, valueBytes: f.bytes}
	for pass := 1; pass <= passes; pass++ {
		if err := f.reopen(ctx); err != nil {
			return res, err
		}
		r, err := b.transactLoop(ctx, fmt.Sprintf("rawrepeat-%d", pass), in, n, maxPoll, func(fs kgo.Fetches, produce func(*kgo.Record)) (int, error) {
			recs, err := f.lookup(fs)
			if err != nil {
				return len(recs), err
			}
			for i, r := range recs {
				val, _, _ := f.pfs[i].Value()
				produce(&kgo.Record{Topic: out, Key: r.Key, Value: val})
			}
			return len(recs), nil
		})
		if err != nil {
			return res, err
		}
		res.add(r)
	}
	return res, nil
}

// add counts pass r in res.
func (res *rawRepeatResult) add(r rawResult) {
	res.passes++
	res.inputs += r.inputs
	res.polls += r.polls
	res.elapsed += r.elapsed
	res.cpu += r.cpu
	res.brokerCPU += r.brokerCPU
}

// populateFloor writes a record for each of topic's first n commands to
// f, reading them with a plain read_committed consumer, in batches of at
// most floorBatch (not timed).
func (b *bench) populateFloor(ctx context.Context, f *repeatFloor, topic string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return fmt.Errorf("rawrepeat: populate client: %w", err)
	}
	defer cl.Close()
	for f.stored < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("rawrepeat: populate, %d of %d: %w", f.stored, n, err)
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("rawrepeat: populate: %w", err)
		}
		recs := fs.Records()
		for len(recs) > 0 {
			k := min(len(recs), floorBatch)
			if err := f.store(recs[:k]); err != nil {
				return err
			}
			recs = recs[k:]
		}
	}
	return nil
}

// floorBatch is the most records populateFloor writes in one batch: the
// executor writes a transaction's records in one, and its transactions
// hold about a poll's (MaxPollRecords, 500). A poll of the populating
// consumer brings up to ~25 000, and a batch that size (25 MB) would
// reach Pebble as a flushable batch of its own, a different shape of
// tables than the executor's memtable flushes.
const floorBatch = 500

// repeatFloor is the index the repeat floor reads: a dedupe store (the
// executor's own, with its options) holding, for each command stored,
// a sealed record of the shape and size the executor stores for a noop
// command of the bench (every field a real one has, its data, one
// attempt's evidence, a hash chain per partition: ~1 KB).
type repeatFloor struct {
	s        *dedupe.Store
	dir      string
	executor string
	data     json.RawMessage
	chain    map[int32]string // partition → the last record's hash (prev_hash)
	stored   int
	bytes    int64 // of the values stored
	// lookup's, reused from poll to poll.
	recs []*kgo.Record
	keys []dedupe.PrefetchKey
	pfs  []dedupe.Prefetched
}

func openRepeatFloor(dir, executor string, data json.RawMessage) (*repeatFloor, error) {
	s, err := dedupe.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("rawrepeat: open index: %w", err)
	}
	return &repeatFloor{s: s, dir: dir, executor: executor, data: data, chain: map[int32]string{}}, nil
}

func (f *repeatFloor) close() error {
	if f.s == nil {
		return nil
	}
	err := f.s.Close()
	f.s = nil
	return err
}

// store writes the records of recs' commands in one synced batch, with
// their partitions' progress, as the executor writes a transaction's.
func (f *repeatFloor) store(recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	bt := f.s.NewBatchSize(len(recs))
	defer bt.Close()
	last := map[int32]int64{}
	now := time.Now().UTC()
	for _, r := range recs {
		key, err := attr(r.Value, schemas.ExtIdempotencyKey)
		if err != nil {
			return fmt.Errorf("rawrepeat: input at %d/%d: %w", r.Partition, r.Offset, err)
		}
		id, err := attr(r.Value, "id")
		if err != nil {
			return fmt.Errorf("rawrepeat: input at %d/%d: %w", r.Partition, r.Offset, err)
		}
		fp := sha256.Sum256(append([]byte(key), f.data...))
		rec := schemas.Record{
			IdempotencyKey: key, Entity: string(r.Key), Action: "bench.noop", Status: schemas.StatusSucceeded,
			Fingerprint: "sha256:" + hex.EncodeToString(fp[:]), Attempts: 1, EntityVersion: 1,
			Result:    json.RawMessage(`{"noop":true}`),
			Command:   schemas.CommandRef{ID: id, Source: "onceflight-bench", Partition: r.Partition, Offset: r.Offset},
			StartedAt: &now, FinishedAt: &now, Executor: f.executor, Epoch: 1, Data: f.data,
			EstablishedBy: schemas.EstablishedByAnswer,
			Evidence:      []schemas.Evidence{{Kind: schemas.EvidenceAttempt, Attempt: 1, At: now, EndedAt: &now, Answer: schemas.AnswerSucceeded}},
			PrevHash:      f.chain[r.Partition],
		}
		raw, err := wire.SealRecord(&rec)
		if err != nil {
			return fmt.Errorf("rawrepeat: seal: %w", err)
		}
		bt.PutNewRecordBytes(rec, raw)
		f.chain[r.Partition] = rec.Hash
		last[r.Partition] = r.Offset
		f.bytes += int64(len(raw))
	}
	for p, off := range last {
		bt.SetProgress(p, dedupe.Progress{JournalOffset: off + 1, Epoch: 1, LastHash: f.chain[p]})
	}
	if err := bt.Commit(); err != nil {
		return fmt.Errorf("rawrepeat: index commit: %w", err)
	}
	f.stored += len(recs)
	return nil
}

// reopen closes the store and opens it again, as the repeats phase's serve
// opens the executor phase's: its block cache empty, the memtable replayed
// from the WAL. It returns once the presence filter's scan of the stored
// keys (a background read of every key at open) has ended, so that the
// scan is not counted in the floor.
func (f *repeatFloor) reopen(ctx context.Context) error {
	if err := f.close(); err != nil {
		return fmt.Errorf("rawrepeat: close index: %w", err)
	}
	s, err := dedupe.Open(f.dir, dedupe.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return fmt.Errorf("rawrepeat: open index again: %w", err)
	}
	f.s = s
	deadline := time.Now().Add(time.Minute)
	for !s.PresenceReady() {
		if time.Now().After(deadline) {
			return errors.New("rawrepeat: the index's presence filter was not ready within a minute")
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// lookup reads the records of fs's inputs ahead, in key order through one
// iterator (dedupe.Store.Prefetch), into f.pfs, one per input in poll
// order, and returns the inputs in that order. The idempotency key is
// found in the input's value (attr), the entity is its Kafka key. An input
// whose record is not in the store is an error: every input of the floor
// is a repeat.
func (f *repeatFloor) lookup(fs kgo.Fetches) ([]*kgo.Record, error) {
	recs, keys := f.recs[:0], f.keys[:0]
	var err error
	fs.EachRecord(func(r *kgo.Record) {
		key, kerr := attr(r.Value, schemas.ExtIdempotencyKey)
		if kerr != nil && err == nil {
			err = fmt.Errorf("input at %d/%d: %w", r.Partition, r.Offset, kerr)
		}
		recs = append(recs, r)
		keys = append(keys, dedupe.PrefetchKey{Entity: string(r.Key), Key: key})
	})
	f.recs, f.keys = recs, keys
	if err != nil {
		return recs, err
	}
	if cap(f.pfs) < len(keys) {
		f.pfs = make([]dedupe.Prefetched, len(keys))
	}
	f.pfs = f.pfs[:len(keys)]
	f.s.Prefetch(keys, f.pfs)
	for i := range f.pfs {
		if _, found, read := f.pfs[i].Value(); !read || !found {
			return recs, fmt.Errorf("the record of %s/%s: read %v, found %v", keys[i].Entity, keys[i].Key, read, found)
		}
	}
	return recs, nil
}

// attr is the string value of a top-level attribute of a structured
// command as the bench encodes it (schemas.EncodeCommand, compact JSON, its
// first occurrence), without decoding the command: the least a pipeline
// that needs a command's key must do. The bench's ids and keys have no
// escapes; a value with one is an error.
func attr(v []byte, name string) (string, error) {
	var pat [64]byte
	p := append(append(append(pat[:0], '"'), name...), `":"`...)
	i := bytes.Index(v, p)
	if i < 0 {
		return "", fmt.Errorf("no %q attribute", name)
	}
	rest := v[i+len(p):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || bytes.IndexByte(rest[:j], '\\') >= 0 {
		return "", fmt.Errorf("attribute %q: not a plain string", name)
	}
	return string(rest[:j]), nil
}

// rawRepeatRow is the raw phase's row of the repeat floor; newCPU is the
// raw new-key floor's CPU per input (0: not measured).
func rawRepeatRow(r rawRepeatResult, newCPU float64) row {
	cpu := perInput(r.cpu, r.inputs)
	return row{Phase: "raw", Measure: "repeats: inputs/s (read 1, look up 1 in key order, write 1, txn per poll)", Value: rate(r.inputs, r.elapsed), Unit: "/s",
		Vs: "raw new CPU/input", Ratio: ratio(newCPU, cpu), CPUPerCmd: cpu,
		Note: fmt.Sprintf("the floor of a repeat; ratio: raw new CPU per input / this; %d inputs in %d passes, each input looked up once a pass in an index of %d records (%.0f B each, the executor's options, reopened cold for each pass), %d polls (%.0f per poll), in-process%s",
			r.inputs, r.passes, r.keys, float64(r.valueBytes)/float64(max(1, r.keys)), r.polls, float64(r.inputs)/float64(max(1, r.polls)), brokerNote(r.brokerCPU, r.inputs))}
}

// repeatsFloorNote is the repeats row's note on CPU: serve's new-key and
// repeat CPU per command and their ratio, the raw floors' and theirs, and
// what a repeat would cost at the goal (3× a new key's CPU) as a multiple
// of its floor, beside what a new key costs as a multiple of its own.
// Empty when serve's CPU was not measured.
func repeatsFloorNote(serveNew, serveRep, rawNew, rawRep float64) string {
	if serveNew <= 0 || serveRep <= 0 {
		return ""
	}
	s := fmt.Sprintf("; by CPU %.1f / %.1f µs = %.2f×", serveNew, serveRep, serveNew/serveRep)
	if rawNew <= 0 || rawRep <= 0 {
		return s
	}
	at3 := serveNew / 3
	return s + fmt.Sprintf(", the raw floors' %.2f / %.2f µs = %.2f×; 3× needs a repeat at %.1f µs, %.1f× its floor (a new key is %.1f× its own)",
		rawNew, rawRep, rawNew/rawRep, at3, at3/rawRep, serveNew/rawNew)
}
