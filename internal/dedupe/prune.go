package dedupe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceflight/onceflight/schemas"
)

// Pruning (docs/events.md#execution-records, issue 7). A final record lives in three stages:
//
//  1. full, for dedupe_retention after its FinishedAt: a repeat is answered
//     from it (replayed outcome with the result);
//  2. stub, until key_memory: Prune has rewritten it to the few fields that
//     answer a late repeat (key_expired, or idempotency_key_reused when the
//     fingerprint differs); Data, Result, error message, resolution, trace and
//     fencing fields are gone;
//  3. forgotten: Prune has deleted the record and its index entries; a
//     command with the key is new work.
//
// The prune index holds one entry per prunable record, "f/<ts>/<key>" while
// it is full and "k/<ts>/<key>" once it is a stub, where ts is FinishedAt in
// Unix nanoseconds. Both sort by age, so a Prune call reads exactly the
// entries that are due, from the oldest, and stops at the first one that is
// not: it never scans records that stay. Batch.Commit keeps f/ in step with
// the records (indexKeys); only Prune writes k/.
//
// Only succeeded, failed and rejected records with a FinishedAt are
// prunable. in_progress and held are not final; unresolved waits for
// settlement however old it is. None of them gets an entry, so Prune cannot
// reach them.

// DefaultPruneLimit is how many records one Prune call handles at most when
// PruneLimit is not given. At a few µs per record this keeps a call in the
// low milliseconds, so it can run from the executor between batches.
const DefaultPruneLimit = 1000

// pruneChunk is how many records Prune checks and writes under s.mu at a
// time: the single writer's Commit waits at most for one chunk.
const pruneChunk = 128

// PruneStats says what one Prune call did.
type PruneStats struct {
	// Stubbed records were past keep: their result is gone, the key stays.
	Stubbed int
	// Forgotten records were past memory: record and index entries deleted.
	Forgotten int
	// Indexed records were added to the prune index by the upgrade backfill
	// of a store written before the index existed.
	Indexed int
	// Skipped index entries were stale, or their record changed between
	// Prune's scan and its write (a newer record won; nothing was written
	// over it).
	Skipped int
	// More is true when the call stopped at its limit with work left: call
	// again soon rather than at the next period.
	More bool
}

type pruneConfig struct {
	limit int
}

// PruneOption configures one Prune call.
type PruneOption func(*pruneConfig)

// Prune moves final records along their stages (see above) as of now:
// records whose FinishedAt is more than keep before now become stubs, and
// those more than memory before now are deleted with every index entry that
// names them. keep and memory must be the executor's dedupe_retention and
// key_memory: the executor only answers key_expired from a record older than
// its own dedupe_retention, so pruning with a shorter keep would replay a
// stub as if it were the result. keep <= 0 never stubs, memory <= 0 never
// forgets; memory < keep (both set) is an error, as in the config.
//
// A call does at most PruneLimit records, committing pruneChunk at a time
// (unsynced: a lost prune is redone by the next call), and returns with
// More set if it stopped at the limit. It resumes from where the previous
// call stopped (an in-memory cursor; after a restart, from the oldest
// entry). Calls are serialized; each is safe to run while the executor
// commits batches: see Store.mu.
//
// A store written before the prune index existed is indexed by the first
// calls, in the same bounded steps, before its old records can be pruned.
//
// Deleted and rewritten data is reclaimed by Pebble's compactions (its
// tombstone-density heuristic picks up dense deletions); Compact forces it.
func (s *Store) Prune(ctx context.Context, now time.Time, keep, memory time.Duration, opts ...PruneOption) (PruneStats, error) {
	cfg := pruneConfig{limit: DefaultPruneLimit}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.limit <= 0 {
		cfg.limit = DefaultPruneLimit
	}
	var st PruneStats
	if keep > 0 && memory > 0 && memory < keep {
		return st, fmt.Errorf("dedupe: prune: memory %s is shorter than keep %s", memory, keep)
	}
	if err := s.enter(); err != nil {
		return st, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return st, err
	}
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()

	p := pruner{s: s, now: now, keep: keep, memory: memory, cfg: cfg, st: &st, budget: cfg.limit}
	// Forget first: it is what frees space. Then stub, then backfill.
	if memory > 0 {
		if err := p.phase(ctx, phaseStub, now.Add(-memory)); err != nil {
			return st, err
		}
	}
	switch {
	case keep > 0:
		if err := p.phase(ctx, phaseFull, now.Add(-keep)); err != nil {
			return st, err
		}
	case memory > 0:
		// Nothing is stubbed, but full records past memory are still
		// forgotten.
		if err := p.phase(ctx, phaseFull, now.Add(-memory)); err != nil {
			return st, err
		}
	}
	if err := p.backfill(ctx); err != nil {
		return st, err
	}
	// Records the backfill just indexed may be due already: come back.
	st.More = p.more || st.Indexed > 0
	return st, nil
}

// Compact compacts the whole store, so that what Prune deleted or rewrote
// leaves the disk now rather than when Pebble's own compactions reach it. It
// rewrites every table: call it rarely (after a large backlog was pruned),
// not after every Prune.
func (s *Store) Compact(ctx context.Context) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background() // Pebble's Compact panics on nil.
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return fmt.Errorf("dedupe: compact: %w", err)
	}
	return nil
}

// phase names one of the two prune indexes.
type phase int

const (
	phaseFull phase = iota // f/: full records, due for stubbing
	phaseStub              // k/: stubs, due for forgetting
)

func (ph phase) prefix() string {
	if ph == phaseStub {
		return prefixPruneStub
	}
	return prefixPruneFull
}

// pruneState is kept under Store.mu.
//
// cursor[ph] is a resume position: no entry of that index sorts below it.
// Prune advances it past what it processed, so a periodic call does not
// step again over the tombstones the previous calls left at the front of the
// index. Every write of an entry lowers it if needed (lowerCursor), which
// covers old records that arrive late (journal replay, backfill); gen tells
// Prune that happened while it was not holding the lock, so it does not
// advance past them.
type pruneState struct {
	cursor [2][]byte
	gen    [2]uint64
	// active is the upper bound of the scan a Prune call is running on an
	// index, nil if none. An entry written below it may be one the scan's
	// iterator (a point-in-time view) did not see, so it bumps gen too.
	// New records sort above it (their FinishedAt is after the cutoff) and
	// leave gen alone, so steady traffic does not stall the cursor.
	active [2][]byte

	// indexed is false while an upgraded store's records are not all in the
	// prune index; backfillFrom is the next record key to index.
	indexed      bool
	backfillFrom []byte
}

func (ps *pruneState) lowerCursor(ph phase, key string) {
	switch {
	case ps.cursor[ph] != nil && key < string(ps.cursor[ph]):
		ps.cursor[ph] = []byte(key)
		ps.gen[ph]++
	case ps.active[ph] != nil && key < string(ps.active[ph]):
		ps.gen[ph]++
	}
}

// pruneMeta is the persisted backfill state, at keyPruneMeta.
type pruneMeta struct {
	Indexed bool   `json:"indexed"`
	From    string `json:"from,omitempty"`
}

// loadPruneState is called by Open.
//
// Upgrade: a store written before the prune index has records but no
// keyPruneMeta. Its records are then indexed by Prune, a chunk per call from
// the cursor kept in keyPruneMeta, before they can be pruned. A new (empty)
// store is marked indexed at once, since every record it gets goes through
// Batch.Commit, which indexes it.
func (s *Store) loadPruneState() error {
	var m pruneMeta
	found, err := s.get(s.db, []byte(keyPruneMeta), &m)
	if err != nil {
		return err
	}
	if found {
		s.prune.indexed = m.Indexed
		s.prune.backfillFrom = []byte(m.From)
		return nil
	}
	lower := []byte(prefixRecord)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return fmt.Errorf("dedupe: new iterator: %w", err)
	}
	hasRecords := it.First()
	err = errors.Join(it.Error(), it.Close())
	if err != nil {
		return fmt.Errorf("dedupe: scan records: %w", err)
	}
	if hasRecords {
		s.log.Info("dedupe: store has no prune index yet; Prune will build it from the records")
		return nil
	}
	s.prune.indexed = true
	val, _ := json.Marshal(pruneMeta{Indexed: true})
	if err := s.guard(func() error { return s.db.Set([]byte(keyPruneMeta), val, pebble.Sync) }); err != nil {
		return fmt.Errorf("dedupe: write prune state: %w", err)
	}
	return nil
}

// prunable reports whether rec gets a prune-index entry: final, settled, and
// with a FinishedAt to count its age from.
func prunable(rec *schemas.Record) bool {
	if rec.FinishedAt == nil {
		return false
	}
	switch rec.Status {
	case schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected:
		return true
	}
	return false
}

const tsWidth = 19 // digits of math.MaxInt64

// pruneTS formats t as zero-padded Unix nanoseconds, clamped to what int64
// nanoseconds can hold, so that key order is time order.
func pruneTS(t time.Time) string {
	var b [tsWidth]byte
	return string(appendPruneTS(b[:0], t))
}

// appendPruneTS appends pruneTS(t) to dst.
func appendPruneTS(dst []byte, t time.Time) []byte {
	var n int64
	switch {
	case t.Before(time.Unix(0, 0)):
		n = 0
	case t.After(time.Unix(0, math.MaxInt64)):
		n = math.MaxInt64
	default:
		n = t.UnixNano()
	}
	var digits [tsWidth]byte
	s := strconv.AppendInt(digits[:0], n, 10)
	return append(append(dst, "0000000000000000000"[:tsWidth-len(s)]...), s...)
}

func pruneIndexKey(prefix string, rec *schemas.Record) string {
	return prefix + pruneTS(*rec.FinishedAt) + "/" + scopeOf(rec)
}

// parsePruneKey returns the scope (entity and key) of a prune-index key.
func parsePruneKey(k []byte) (string, bool) {
	const head = 2 + tsWidth + 1
	if len(k) < head || k[head-1] != '/' {
		return "", false
	}
	return string(k[head:]), true
}

// stubRecord is the stored form of a stub. Its JSON names are those of
// schemas.Record, so Lookup decodes it as a Record with the dropped fields
// zero, and the store stays one format. It keeps what the executor reads
// from a record past dedupe_retention: key, entity and action (for the
// key-reused message), status, fingerprint (reuse check), finished_at
// (key_expired and key_memory), the command reference (which journal record
// and command it stands for) and epoch. hash and prev_hash are dropped: the
// journal chain is checked from the journal and Progress.LastHash, never from
// stored records, and the two take 150 of a stub's ~300 bytes. Error keeps
// its code only; attempts, entity_version, data, result, resolution, trace,
// deadline and fencing token go.
type stubRecord struct {
	IdempotencyKey string             `json:"idempotency_key"`
	Entity         string             `json:"entity"`
	Action         string             `json:"action,omitempty"`
	Status         schemas.Status     `json:"status"`
	Fingerprint    string             `json:"fingerprint,omitempty"`
	Error          *stubError         `json:"error,omitempty"`
	Command        schemas.CommandRef `json:"command"`
	FinishedAt     *time.Time         `json:"finished_at"`
	Epoch          int64              `json:"epoch,omitempty"`
	// UniqueKey and Release say which index entries the record has, so
	// forgetting it deletes them all.
	UniqueKey string              `json:"unique_key,omitempty"`
	Release   *schemas.Resolution `json:"release,omitempty"`
}

type stubError struct {
	Code string `json:"code"`
}

func stubOf(rec *schemas.Record) stubRecord {
	st := stubRecord{
		IdempotencyKey: rec.IdempotencyKey,
		Entity:         rec.Entity,
		Action:         rec.Action,
		Status:         rec.Status,
		Fingerprint:    rec.Fingerprint,
		Command:        rec.Command,
		FinishedAt:     rec.FinishedAt,
		Epoch:          rec.Epoch,
		UniqueKey:      rec.UniqueKey,
		Release:        rec.Release,
	}
	if rec.Error != nil {
		st.Error = &stubError{Code: rec.Error.Code}
	}
	return st
}

// decodeSlim decodes a stored record (full or stub) into the fields a stub
// keeps, which is all Prune needs to decide and to write the stub; skipping
// the rest roughly halves the decoding that dominates Prune's CPU time.
func decodeSlim(val []byte, rec *schemas.Record) error {
	var st stubRecord
	if err := json.Unmarshal(val, &st); err != nil {
		return err
	}
	*rec = schemas.Record{
		IdempotencyKey: st.IdempotencyKey,
		Entity:         st.Entity,
		Action:         st.Action,
		Status:         st.Status,
		Fingerprint:    st.Fingerprint,
		Command:        st.Command,
		FinishedAt:     st.FinishedAt,
		Epoch:          st.Epoch,
		UniqueKey:      st.UniqueKey,
		Release:        st.Release,
	}
	if st.Error != nil {
		rec.Error = &schemas.Error{Code: st.Error.Code}
	}
	return nil
}

// pruner is the state of one Prune call.
type pruner struct {
	s            *Store
	now          time.Time
	keep, memory time.Duration
	cfg          pruneConfig
	st           *PruneStats
	budget       int
	more         bool
}

// candidate is a record read during the scan, outside s.mu.
type candidate struct {
	ikey  []byte         // its prune-index key ("" in backfill)
	key   string         // idempotency key
	raw   []byte         // record value as read, nil if absent
	rec   schemas.Record // decodeSlim of raw
	valid bool           // raw decoded
}

// pointReader does point reads like Store.get, but through one iterator, so
// a chunk's reads do not each build one. It sees the store as of its
// creation: apply creates it under s.mu, where nothing else commits.
type pointReader struct {
	s  *Store
	it *pebble.Iterator
}

func (s *Store) newPointReader() (*pointReader, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	it, err := s.db.NewIter(&pointIterOptions)
	if err != nil {
		return nil, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	return &pointReader{s: s, it: it}, nil
}

// get returns key's value, valid until the next call, or nil if absent.
func (r *pointReader) get(key []byte) (_ []byte, err error) {
	defer r.s.recoverBlobPanic(&err)
	if !r.it.SeekPrefixGE(key) || !bytes.Equal(r.it.Key(), key) {
		if err := r.it.Error(); err != nil {
			return nil, fmt.Errorf("dedupe: read %q: %w", key, r.s.reportCorrupt(err))
		}
		return nil, nil
	}
	val, err := r.it.ValueAndErr()
	if err != nil {
		return nil, fmt.Errorf("dedupe: read %q: %w", key, r.s.reportCorrupt(err))
	}
	if val == nil {
		val = []byte{}
	}
	return val, nil
}

func (r *pointReader) close() error { return r.it.Close() }

func (p *pruner) read(pr *pointReader, ikey []byte, key string) (candidate, error) {
	c := candidate{ikey: ikey, key: key}
	val, err := pr.get(recordKey(key))
	if err != nil || val == nil {
		return c, err
	}
	c.raw = bytes.Clone(val)
	c.valid = decodeSlim(c.raw, &c.rec) == nil
	return c, nil
}

// fresh re-reads c's record under s.mu. The scan's decoding is reused when
// the bytes did not change.
func (p *pruner) fresh(pr *pointReader, c *candidate) (schemas.Record, bool, error) {
	val, err := pr.get(recordKey(c.key))
	if err != nil || val == nil {
		return schemas.Record{}, false, err
	}
	if c.valid && bytes.Equal(val, c.raw) {
		return c.rec, true, nil
	}
	var rec schemas.Record
	if err := decodeSlim(val, &rec); err != nil {
		return schemas.Record{}, false, fmt.Errorf("dedupe: decode record %q: %w", c.key, err)
	}
	return rec, true, nil
}

// phase handles the due entries of one prune index: those that sort below
// ph's prefix + pruneTS(cutoff), i.e. whose FinishedAt is before cutoff.
func (p *pruner) phase(ctx context.Context, ph phase, cutoff time.Time) error {
	s := p.s
	upper := []byte(ph.prefix() + pruneTS(cutoff))
	for p.budget > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		lower, gen := s.prune.cursor[ph], s.prune.gen[ph]
		s.prune.active[ph] = upper
		s.mu.Unlock()
		if lower == nil {
			lower = []byte(ph.prefix())
		}
		if bytes.Compare(lower, upper) >= 0 {
			p.endScan(ph)
			return nil
		}
		n := min(pruneChunk, p.budget)
		cands, exhausted, err := p.scan(lower, upper, n)
		if err == nil && len(cands) > 0 {
			err = p.apply(ph, cands, gen)
			p.budget -= len(cands)
		}
		p.endScan(ph)
		if err != nil || exhausted {
			return err
		}
	}
	p.more = true
	return nil
}

func (p *pruner) endScan(ph phase) {
	p.s.mu.Lock()
	p.s.prune.active[ph] = nil
	p.s.mu.Unlock()
}

// scan reads up to n index entries in [lower, upper) and their records.
func (p *pruner) scan(lower, upper []byte, n int) ([]candidate, bool, error) {
	it, err := p.s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, false, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	defer it.Close()
	pr, err := p.s.newPointReader()
	if err != nil {
		return nil, false, err
	}
	defer pr.close()
	var cands []candidate
	ok := it.First()
	for ; ok && len(cands) < n; ok = it.Next() {
		ikey := bytes.Clone(it.Key())
		key, good := parsePruneKey(ikey)
		if !good {
			// Not written by this package; leave it, but count it.
			p.st.Skipped++
			continue
		}
		c, err := p.read(pr, ikey, key)
		if err != nil {
			return nil, false, err
		}
		cands = append(cands, c)
	}
	if err := it.Error(); err != nil {
		return nil, false, fmt.Errorf("dedupe: scan prune index: %w", err)
	}
	return cands, !ok, nil
}

// apply checks each candidate again under s.mu and writes its stub or
// deletion in one batch. Holding s.mu, nothing can commit between the check
// and the write, so:
//   - an index entry that is gone means a Batch overwrote the record after
//     the scan (writeIndex deleted the entry): skip, the newer record stays;
//   - otherwise the record is re-read and the decision made on what is
//     stored now, not on what the scan saw.
func (p *pruner) apply(ph phase, cands []candidate, gen uint64) error {
	return p.locked(func(pr *pointReader, pb *pebble.Batch) error { return p.applyLocked(pr, pb, ph, cands, gen) })
}

// locked runs fn under s.mu with a point reader and a batch of its own:
// nothing commits between what fn reads and what it writes.
func (p *pruner) locked(fn func(*pointReader, *pebble.Batch) error) error {
	if h := p.s.pruneHook; h != nil {
		h()
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	pr, err := s.newPointReader()
	if err != nil {
		return err
	}
	defer pr.close()
	pb := s.db.NewBatch()
	defer pb.Close()
	return fn(pr, pb)
}

func (p *pruner) applyLocked(pr *pointReader, pb *pebble.Batch, ph phase, cands []candidate, gen uint64) error {
	s := p.s
	var stubKeys []string
	var leftFrom []byte // first entry left in place, if any
	for i := range cands {
		c := &cands[i]
		entry, err := pr.get(c.ikey)
		if err != nil {
			return err
		}
		if entry == nil {
			p.st.Skipped++
			continue
		}
		rec, found, err := p.fresh(pr, c)
		if err != nil {
			return err
		}
		if !found || !prunable(&rec) || pruneIndexKey(ph.prefix(), &rec) != string(c.ikey) {
			// The entry names no record, or not this one: it is stale.
			if err := pb.Delete(c.ikey, nil); err != nil {
				return fmt.Errorf("dedupe: batch: %w", err)
			}
			p.st.Skipped++
			continue
		}
		age := p.now.Sub(*rec.FinishedAt)
		switch {
		case p.memory > 0 && age > p.memory:
			if err := p.forget(pb, &rec, ph); err != nil {
				return err
			}
		case ph == phaseFull && p.keep > 0 && age > p.keep:
			val, err := json.Marshal(stubOf(&rec))
			if err != nil {
				return fmt.Errorf("dedupe: encode stub %q: %w", rec.IdempotencyKey, err)
			}
			k := pruneIndexKey(prefixPruneStub, &rec)
			if err := errors.Join(
				pb.Set(recordKeyOf(&rec), val, nil),
				pb.Delete(c.ikey, nil),
				pb.Set([]byte(k), nil, nil),
			); err != nil {
				return fmt.Errorf("dedupe: batch: %w", err)
			}
			stubKeys = append(stubKeys, k)
			p.st.Stubbed++
		default:
			// Not due after all (clamped times): leave it, and do not move
			// the cursor past it.
			if leftFrom == nil {
				leftFrom = c.ikey
			}
			p.st.Skipped++
		}
	}
	for _, k := range stubKeys {
		s.prune.lowerCursor(phaseStub, k)
	}
	if !pb.Empty() {
		if err := s.guard(func() error { return pb.Commit(pebble.NoSync) }); err != nil {
			return fmt.Errorf("dedupe: prune commit: %w", err)
		}
	}
	// Everything up to the last candidate is handled; resume after it unless
	// a commit put an entry below the cursor meanwhile.
	if s.prune.gen[ph] == gen {
		s.prune.cursor[ph] = cands[len(cands)-1].ikey
		if leftFrom != nil {
			s.prune.cursor[ph] = leftFrom
		}
	}
	return nil
}

// forget deletes rec and every index entry that can name it: status, and
// the prune entry of the phase that found it (a prunable record is never
// unresolved, so it has no u/ entry): f/ for a full record, k/ for a stub,
// whose f/ entry the stubbing deleted. A second tombstone there would
// delete nothing, and the prune index has tables of its own
// (recordSpanPolicy): a table of such tombstones overlaps nothing below
// it, so compactions move it whole to the bottom level, where it stays. An
// entity's state stays: its version is business state, and a forgotten
// entity restarting at version 0 would reject a late command's
// expectedversion. Called under s.mu.
func (p *pruner) forget(pb *pebble.Batch, rec *schemas.Record, ph phase) error {
	var a keyArena
	sc := scopeOf(rec)
	keys := indexKeys(nil, rec, sc, &a) // the f/ entry last
	if ph == phaseStub {
		keys = append(keys[:len(keys)-1], a.pruneKey(prefixPruneStub, rec, sc))
	}
	if err := pb.Delete(recordKeyOf(rec), nil); err != nil {
		return fmt.Errorf("dedupe: batch: %w", err)
	}
	for _, k := range keys {
		if err := pb.Delete(k, nil); err != nil {
			return fmt.Errorf("dedupe: batch: %w", err)
		}
	}
	p.st.Forgotten++
	return nil
}

// backfill indexes the records of a store written before the prune index,
// with what is left of the budget. Under s.mu each record is re-read and
// given its f/ entry unless it already has one (or a k/ one); entries are
// idempotent, so a record a Batch rewrote meanwhile is simply indexed as it
// is now. The position is saved in keyPruneMeta with each chunk.
func (p *pruner) backfill(ctx context.Context) error {
	s := p.s
	for !s.prune.indexed {
		if p.budget <= 0 {
			p.more = true
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		lower := []byte(prefixRecord)
		if len(s.prune.backfillFrom) > 0 {
			lower = s.prune.backfillFrom
		}
		n := min(pruneChunk, p.budget)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd([]byte(prefixRecord))})
		if err != nil {
			return fmt.Errorf("dedupe: new iterator: %w", err)
		}
		var cands []candidate
		ok := it.First()
		for ; ok && len(cands) < n; ok = it.Next() {
			val, err := it.ValueAndErr()
			if err != nil {
				it.Close()
				return fmt.Errorf("dedupe: backfill scan: %w", s.reportCorrupt(err))
			}
			c := candidate{key: string(it.Key()[len(prefixRecord):]), raw: bytes.Clone(val)}
			c.valid = decodeSlim(c.raw, &c.rec) == nil
			cands = append(cands, c)
		}
		var next []byte
		if ok {
			next = bytes.Clone(it.Key())
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return fmt.Errorf("dedupe: backfill scan: %w", err)
		}
		if err := p.backfillChunk(cands, next); err != nil {
			return err
		}
		p.budget -= len(cands)
	}
	return nil
}

func (p *pruner) backfillChunk(cands []candidate, next []byte) error {
	return p.locked(func(pr *pointReader, pb *pebble.Batch) error { return p.backfillLocked(pr, pb, cands, next) })
}

func (p *pruner) backfillLocked(pr *pointReader, pb *pebble.Batch, cands []candidate, next []byte) error {
	s := p.s
	var added []string
	for i := range cands {
		rec, found, err := p.fresh(pr, &cands[i])
		if err != nil {
			return err
		}
		if !found || !prunable(&rec) {
			continue
		}
		stubbed, err := pr.get([]byte(pruneIndexKey(prefixPruneStub, &rec)))
		if err != nil {
			return err
		}
		if stubbed != nil {
			continue
		}
		k := pruneIndexKey(prefixPruneFull, &rec)
		if err := pb.Set([]byte(k), nil, nil); err != nil {
			return fmt.Errorf("dedupe: batch: %w", err)
		}
		added = append(added, k)
		p.st.Indexed++
	}
	m := pruneMeta{Indexed: next == nil, From: string(next)}
	val, _ := json.Marshal(m)
	if err := pb.Set([]byte(keyPruneMeta), val, nil); err != nil {
		return fmt.Errorf("dedupe: batch: %w", err)
	}
	if err := s.guard(func() error { return pb.Commit(pebble.NoSync) }); err != nil {
		return fmt.Errorf("dedupe: backfill commit: %w", err)
	}
	for _, k := range added {
		s.prune.lowerCursor(phaseFull, k)
	}
	s.prune.indexed, s.prune.backfillFrom = m.Indexed, next
	if m.Indexed {
		s.log.Info("dedupe: prune index built")
	}
	return nil
}
