package dedupe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// errBatchDone is returned when a Batch is used after Commit or Close.
var errBatchDone = errors.New("dedupe: batch already committed or closed")

// Batch collects records, entity states and partition progress that must
// become durable together: a record must never be visible without the
// Progress that says its journal entry was consumed, or replay would apply it
// twice (harmless) or, worse, skip one (G4). Commit writes all of it in one
// synced Pebble batch.
//
// Nothing reaches Pebble before Commit; the batch keeps only what it touched
// (keys, entities, partitions of this batch), never a map of all keys.
//
// A Batch is not safe for concurrent use. Batches that touch the same keys or
// entities must be committed one after another (one writer per partition;
// keys and entities belong to one partition), because each batch reads the
// previous status and entity state when it first touches them.
type Batch struct {
	s        *Store
	records  map[string]*pendingRecord
	entities map[string]*EntityState
	progress map[int32]Progress
	it       *pebble.Iterator // see iter
	fresh    *Fresh           // UseFresh
	pending  slab[pendingRecord]
	recs     slab[schemas.Record] // copies of the records put by value
	hint     int                  // NewBatchSize's records
	states   slab[EntityState]
	// err is the first error of PutRecord, which cannot return one; Commit
	// reports it and writes nothing.
	err  error
	done bool
}

// pendingRecord is the latest record of a key in this batch, plus where its
// index entries were before the batch so Commit can remove them.
// Only the previous record's index fields are kept (recMeta): a full
// record here was half of what a batch allocated per key.
type pendingRecord struct {
	// rec is the caller's record (PutNewRecordRef) or the batch's copy
	// of it (recs): a pointer, so that a record put by reference is
	// neither copied nor held twice (~0.5 KB per new key).
	rec       *schemas.Record
	raw       []byte // rec's encoding, if the caller had it
	prevFound bool
	prev      recMeta
}

// NewBatch starts a batch. Call Close when done with it, committed or not.
func (s *Store) NewBatch() *Batch { return s.NewBatchSize(0) }

// NewBatchSize is NewBatch for about records records (a hint): its maps
// are sized for them at once rather than grown (a committer's transaction
// knows how many it writes).
func (s *Store) NewBatchSize(records int) *Batch {
	return &Batch{
		s:        s,
		hint:     records,
		records:  make(map[string]*pendingRecord, records),
		entities: make(map[string]*EntityState, records),
		progress: make(map[int32]Progress),
		pending:  make(slab[pendingRecord], 0, min(records, slabLen)),
		states:   make(slab[EntityState], 0, min(records, slabLen)),
	}
}

// kept is a copy of rec that lives as long as the batch, for the
// methods that take a record by value.
func (b *Batch) kept(rec *schemas.Record) *schemas.Record {
	if b.recs == nil { // sized at first use: PutNewRecordRef needs none
		b.recs = make(slab[schemas.Record], 0, max(1, min(b.hint, slabLen)))
	}
	r := b.recs.next()
	*r = *rec
	return r
}

// slab hands out a batch's pendingRecords and entity states: one
// allocation per slabLen of them, not one per record and entity.
type slab[T any] []T

// slabLen is how many Ts a slab allocates at a time: 64 pendingRecords
// stay under the runtime's 32 KiB small-object size (a transaction's
// thousand in one object was a large allocation per transaction).
const slabLen = 64

// next is a zero T from s.
func (s *slab[T]) next() *T {
	if len(*s) == cap(*s) {
		*s = make([]T, 0, slabLen)
	}
	*s = (*s)[:len(*s)+1]
	return &(*s)[len(*s)-1]
}

// Lookup is Store.Lookup as seen from inside the batch: a record put earlier
// in this batch wins over the committed one. The consumer needs this when two
// commands with the same key arrive in one poll.
func (b *Batch) Lookup(entity, key string) (schemas.Record, bool, error) {
	if p, ok := b.records[scope(entity, key)]; ok {
		return *p.rec, true, nil
	}
	return b.s.Lookup(entity, key)
}

// Entity is Store.Entity as seen from inside the batch.
func (b *Batch) Entity(entity string) (EntityState, bool, error) {
	if es, ok := b.entities[entity]; ok {
		return *es, true, nil
	}
	return b.s.Entity(entity)
}

// PutRecord stores rec under its idempotency key, moves its status index
// entries, and updates its entity's state:
//   - succeeded: Version = max(Version, rec.EntityVersion);
//   - in_progress: InFlightKey = this key;
//   - final (Status.Final, unresolved included) for the in-flight key: cleared;
//   - always: LastKey = rec's key, Partition = rec.Command.Partition.
//
// A later PutRecord of the same key in the same batch sees this one. Errors
// (a failed read of the previous state) are kept and returned by Commit.
func (b *Batch) PutRecord(rec schemas.Record) {
	b.PutRecordBytes(rec, nil)
}

// PutRecordBytes is PutRecord for a record whose encoding
// (wire.SealRecord, the journal value) is at hand: raw is stored as it
// is instead of being encoded again. raw nil: encoded here. With raw, rec
// needs only the fields schemas.UnmarshalRecordIndex decodes (the index and
// the entity state are built from those); Lookup on this batch then
// returns that partial record.
func (b *Batch) PutRecordBytes(rec schemas.Record, raw []byte) { b.put(b.kept(&rec), raw, false) }

// PutNewRecordBytes is PutRecordBytes for a key the caller read as absent
// (Lookup found no record) and that nothing but this batch has written
// since: there is no stored record whose index entries would move, so it is
// not read again. The executor knows this of every new key it answers
// without an intent (its entity's worker reads the key, and only that
// worker's answers, through the one committer, write it), and reading it
// again was a Pebble seek per new key in every transaction. A wrong "absent"
// would leave the stored record's old index entries behind, never lose a
// record.
func (b *Batch) PutNewRecordBytes(rec schemas.Record, raw []byte) { b.put(b.kept(&rec), raw, true) }

// PutNewRecordRef is PutNewRecordBytes without the copy of rec: the batch
// keeps rec itself until it is committed or closed, and the caller must
// not change it before then. The executor's committer puts every new
// key's sealed record (which nothing changes once it is staged) this way;
// the copy was ~0.5 KB allocated and copied per new key.
func (b *Batch) PutNewRecordRef(rec *schemas.Record, raw []byte) { b.put(rec, raw, true) }

// CheckAbsent makes PutNewRecordBytes read the key anyway and fail the
// batch if a record of it is stored. The executor's tests turn it on for
// every store (consumer's TestMain): the caller's "absent" rests on
// ordering rules of the executor (consumer/job.go markFresh) that no
// test of this package can see, and a wrong one would otherwise leave old
// index entries behind without any test noticing. Off in production: it
// is the seek PutNewRecordBytes exists to save.
var CheckAbsent bool

func (b *Batch) put(rec *schemas.Record, raw []byte, absent bool) {
	if b.err != nil {
		return
	}
	if b.done {
		b.err = errBatchDone
		return
	}
	key := scopeOf(rec)
	p, ok := b.records[key]
	if !ok {
		// First touch in this batch: remember the committed record so Commit
		// can delete its index entries if the status or partition moved.
		// Only its index fields matter; a key written lately has them in
		// the cache.
		var prev recMeta
		found := false
		// Before the cache: a Fresh must record every key written, or
		// one evicted from the cache would later pass for new.
		seen := b.seenKey(key)
		if absent && CheckAbsent {
			_, stored, err := b.lookupPrev(key)
			if err == nil && stored {
				err = fmt.Errorf("dedupe: PutNewRecordBytes of %q: a record of it is stored", key)
			}
			if err != nil {
				b.err = err
				return
			}
		}
		if !absent { // absent: nothing to read (PutNewRecordBytes)
			if m, ok := b.s.metas.get(key); ok {
				prev, found = m, true
			} else if seen {
				stored, ok, err := b.lookupPrev(key)
				if err != nil {
					b.err = err
					return
				}
				prev, found = metaOf(&stored), ok
			}
		}
		p = b.pending.next()
		p.prevFound, p.prev = found, prev
		b.records[key] = p
	}
	p.rec, p.raw = rec, raw

	es, ok := b.entities[rec.Entity]
	if !ok {
		cur, err := b.entityState(rec.Entity)
		if err != nil {
			b.err = err
			return
		}
		es = b.states.next()
		*es = cur
		b.entities[rec.Entity] = es
	}
	applyToEntity(es, rec)
}

// applyToEntity folds one record into its entity's state.
func applyToEntity(es *EntityState, rec *schemas.Record) {
	es.Partition = rec.Command.Partition
	es.LastKey = rec.IdempotencyKey
	switch {
	case rec.Status == schemas.StatusInProgress:
		// The caller guarantees G1 (no second in-flight key); if it does not,
		// the newest intent is the one a successor must wait for.
		es.InFlightKey = rec.IdempotencyKey
	case rec.Status.Final() && es.InFlightKey == rec.IdempotencyKey:
		es.InFlightKey = ""
	}
	if rec.Status == schemas.StatusSucceeded && rec.EntityVersion > es.Version {
		es.Version = rec.EntityVersion
	}
}

// SetProgress records the journal position of a partition, committed with
// the records it covers.
func (b *Batch) SetProgress(partition int32, p Progress) {
	if b.done {
		if b.err == nil {
			b.err = errBatchDone
		}
		return
	}
	b.progress[partition] = p
}

// Commit writes the batch with one fsync (pebble.Sync). Callers group many
// commands into one batch: a sync per record caps out near the disk's fsync
// rate (~5 k/s), a batch of 1 000 reaches ~0.3 M records/s (measured on these machines).
//
// After Commit, successful or not, the batch cannot be reused.
func (b *Batch) Commit() error { return b.commit(pebble.Sync) }

// CommitNoSync is Commit without the fsync, for a batch whose loss in a
// crash costs only replay: Progress alone, or records the journal already
// holds and nothing was answered from yet. A crash may roll it back; the
// restore then replays the journal from the older Progress.
func (b *Batch) CommitNoSync() error { return b.commit(pebble.NoSync) }

// CommitSyncLater is Commit that returns once the batch is applied — its
// writes visible to every read, as they are with Commit before its fsync
// ends — and leaves the fsync to syncWait, which returns once the batch is
// durable (or the store has failed). A caller can so do other work, such
// as a broker round trip, while the WAL syncs, and still wait for
// durability before it acts on it. syncWait must be called exactly once
// when err is nil; the batch cannot be reused. Pebble's WAL is a prefix:
// a later batch's sync also covers this one.
//
// A failed sync fails the store as a failed Commit does (Pebble reports
// it through Fatalf only when it waits for the sync itself). Its entries
// go in key order, as commit's do.
func (b *Batch) CommitSyncLater() (syncWait func() error, err error) {
	var pb *pebble.Batch
	applied := false
	writer, prepare, recycle := b.sortedBatch(&pb)
	defer recycle()
	err = b.finish(writer, prepare, func() error {
		if err := b.s.db.ApplyNoSyncWait(pb, pebble.Sync); err != nil {
			return err
		}
		applied = true
		return nil
	}, func() {
		if pb != nil && !applied {
			_ = pb.Close()
		}
	})
	if err != nil || !applied {
		// Nothing was written (an empty batch), or nothing to wait for.
		return func() error { return nil }, err
	}
	s := b.s
	return func() error {
		defer pb.Close()
		if err := pb.SyncWait(); err != nil {
			pebbleLogger{s.log, s.fail}.fatal(fmt.Sprintf("pebble: fatal commit error: %v", err))
			return fmt.Errorf("dedupe: commit: %w", s.fail.get())
		}
		return nil
	}, nil
}

// commit writes the batch as one Pebble batch, its entries in key order:
// Pebble inserts a batch into its memtable (a skiplist) in the batch's
// order, and each insert starts its search from where the previous one
// went in (arenaskl.Inserter) when the key lies just after it, instead of
// from the top of the list. In map order, that search was ~6 % of the
// executor's CPU draining new keys; sorted, ~14 % less CPU per record
// writing them in-process (BENCHMARKS.md, round 9 (compact)).
func (b *Batch) commit(sync *pebble.WriteOptions) error {
	var pb *pebble.Batch
	writer, prepare, recycle := b.sortedBatch(&pb)
	defer recycle()
	return b.finish(writer, prepare, func() error { return pb.Commit(sync) }, func() {
		if pb != nil {
			_ = pb.Close()
		}
	})
}

// sortedBatch is finish's writer and prepare for a commit through a Pebble
// batch: the entries are gathered, then written to a new batch, *pb, in
// key order (commit says why).
//
// The entries are taken from tables, and recycle gives them back once
// finish returned: the Pebble batch copied every key and value written to
// it, so nothing reads them after that.
func (b *Batch) sortedBatch(pb **pebble.Batch) (writer func() kvWriter, prepare func() error, recycle func()) {
	t := b.reusedTableEntries()
	return func() kvWriter { return t }, func() error {
		*pb = b.s.db.NewBatchWithSize(b.sizeHint())
		return t.writeSorted(*pb)
	}, t.recycle
}

// tables keeps the entries of batches committed through a Pebble batch
// for the next ones: a transaction's entries, their sort's references and
// the sorted order were ~0.5 KB allocated per new key (BENCHMARKS.md,
// round 17 (newkey2)). A sync.Pool: batches are committed one at a time
// in the executor, but any goroutine may commit one.
var tables sync.Pool

// maxTableEntries bounds what a table kept in tables holds room for
// (~1 MiB of entries): the room of an unusually large batch is left to
// the collector.
const maxTableEntries = 16 << 10

// reusedTableEntries is newTableEntries from tables when one is there.
func (b *Batch) reusedTableEntries() *tableEntries {
	v := tables.Get()
	if v == nil {
		return b.newTableEntries()
	}
	t := v.(*tableEntries)
	t.e = slices.Grow(t.e, 5*len(b.records)+len(b.entities)+len(b.progress))
	return t
}

// recycle empties t (dropping what its entries point to) and keeps it in
// tables for another batch.
func (t *tableEntries) recycle() {
	if cap(t.e) > maxTableEntries {
		return
	}
	clear(t.e)
	clear(t.refs)
	clear(t.order)
	t.e, t.refs, t.order = t.e[:0], t.refs[:0], t.order[:0]
	tables.Put(t)
}

// writeSorted writes t's entries to w in key order.
func (t *tableEntries) writeSorted(w kvWriter) error {
	sorted, err := t.sorted()
	if err != nil {
		return err
	}
	for _, e := range sorted {
		if e.del {
			err = w.Delete(e.key, nil)
		} else {
			err = w.Set(e.key, e.value, nil)
		}
		if err != nil {
			return fmt.Errorf("dedupe: batch: %w", err)
		}
	}
	return nil
}

// kvWriter is where a batch's entries go at commit: a Pebble batch, or a
// sorted table for ingestion (CommitIngest).
type kvWriter interface {
	Set(key, value []byte, _ *pebble.WriteOptions) error
	Delete(key []byte, _ *pebble.WriteOptions) error
}

// sizeHint is about the bytes the batch's entries take: one allocation
// for a Pebble batch instead of doubling from 1 KiB (each doubling copies
// what was written so far).
func (b *Batch) sizeHint() int {
	n := 64 * (len(b.entities) + len(b.progress))
	for key, p := range b.records {
		n += len(p.raw) + 6*(len(key)+24)
	}
	// Rounded up to a power of two, up to the 1 MiB Pebble keeps: a
	// closed batch's buffer goes back to Pebble's pool, and a later batch
	// takes it only if it is as large as that batch asks, so asking for
	// each transaction's own size allocated a new buffer for about one
	// transaction in four in a drain (BENCHMARKS.md, round 17 (newkey2)).
	if n > 1 && n <= 1<<20 {
		n = 1 << bits.Len(uint(n-1))
	}
	return n
}

// finish is what Commit and CommitIngest share: newWriter gives the writer
// the entries go to, prepare (if not nil) runs after they were written and
// before the store's lock is taken, apply makes them durable under it, and
// release frees the writer whatever happened.
func (b *Batch) finish(newWriter func() kvWriter, prepare, apply func() error, release func()) error {
	defer release()
	if b.done {
		return errBatchDone
	}
	defer b.Close()
	if b.err != nil {
		return b.err
	}
	if len(b.records) == 0 && len(b.entities) == 0 && len(b.progress) == 0 {
		return nil
	}
	if err := b.s.enter(); err != nil {
		return err
	}
	defer b.s.leave()
	if err := b.s.usable(); err != nil {
		return err
	}
	w := newWriter()

	// The lowest prune-index entry this batch adds; Prune's resume cursor
	// must not be past it (see pruneState).
	var pruneLow []byte
	keys := keyArena{chunk: b.arenaChunk()}
	for key, p := range b.records {
		// Every record key into the presence filter before the batch is
		// applied (below): a lookup that sees a record must find its key
		// there. A batch that then fails leaves only false positives.
		b.s.present.add(key)
		val := p.raw
		if val == nil {
			var err error
			if val, err = wire.MarshalRecord(*p.rec); err != nil {
				return fmt.Errorf("dedupe: encode record %q: %w", key, err)
			}
		}
		if err := w.Set(keys.join(prefixRecord, key, "", ""), val, nil); err != nil {
			return fmt.Errorf("dedupe: batch: %w", err)
		}
		pk, err := writeIndex(w, p, key, &keys)
		if err != nil {
			return err
		}
		if pk != nil && (pruneLow == nil || bytes.Compare(pk, pruneLow) < 0) {
			pruneLow = pk
		}
	}
	for entity, es := range b.entities {
		if err := w.Set(entityKey(entity), encodeEntity(es), nil); err != nil {
			return fmt.Errorf("dedupe: batch: %w", err)
		}
	}
	for partition, pr := range b.progress {
		val, err := json.Marshal(&pr)
		if err != nil {
			return fmt.Errorf("dedupe: encode progress %d: %w", partition, err)
		}
		if err := w.Set(progressKey(partition), val, nil); err != nil {
			return fmt.Errorf("dedupe: batch: %w", err)
		}
	}
	if prepare != nil {
		if err := prepare(); err != nil {
			return err
		}
	}
	// Under s.mu: a concurrent Prune either sees this batch's records when
	// it re-reads them, or has already written and this batch overwrites it.
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if pruneLow != nil {
		b.s.prune.lowerCursor(phaseFull, string(pruneLow))
	}
	err := b.s.guardKeys(apply)
	// Applied or not, failed or not: the records read ahead of these
	// keys are stale (recordWrites).
	for key := range b.records {
		b.s.recWrites.wrote(key)
	}
	if err != nil {
		return fmt.Errorf("dedupe: commit: %w", err)
	}
	for key, p := range b.records {
		rememberMeta(b.s.metas, key, p.rec)
	}
	for entity, es := range b.entities {
		b.s.entities.put(entity, entityEntry{es: *es, found: true})
	}
	return nil
}

// writeIndex replaces the committed record's index entries by the new ones.
// Unchanged entries are not rewritten, so a status that does not move costs
// no tombstone. sc is the record's scope; the keys are built in a. It
// returns the record's prune-index entry, nil when it has none.
func writeIndex(pb kvWriter, p *pendingRecord, sc string, a *keyArena) (prune []byte, err error) {
	var buf, staleBuf [5][]byte
	newKeys := indexKeys(buf[:0], p.rec, sc, a)
	if p.prevFound {
		prev := p.prev.record(p.rec.Entity, p.rec.IdempotencyKey)
		for _, old := range staleIndexKeys(staleBuf[:0], &prev, sc, a) {
			if !containsKey(newKeys, old) {
				if err := pb.Delete(old, nil); err != nil {
					return nil, fmt.Errorf("dedupe: batch: %w", err)
				}
			}
		}
	}
	for _, k := range newKeys {
		if err := pb.Set(k, nil, nil); err != nil {
			return nil, fmt.Errorf("dedupe: batch: %w", err)
		}
	}
	if prunable(p.rec) {
		prune = newKeys[len(newKeys)-1] // indexKeys puts it last
	}
	return prune, nil
}

// indexKeys appends to dst the secondary-index keys of a record whose
// scope is sc, built in a: its status unless succeeded (statusIndexed),
// its partition's unresolved list while it is unresolved, its unique_by
// tuple while it holds it (HoldsUnique), and last the prune index (f/)
// once it is final and prunable.
func indexKeys(dst [][]byte, rec *schemas.Record, sc string, a *keyArena) [][]byte {
	if statusIndexed(rec.Status) {
		dst = append(dst, a.join(prefixStatus, string(rec.Status), "/", sc))
	}
	if rec.Status == schemas.StatusUnresolved {
		dst = append(dst, a.join(unresolvedPrefix(rec.Command.Partition), sc, "", ""))
	}
	if HoldsUnique(rec) {
		dst = append(dst, a.join(uniquePrefix(rec.Entity, rec.Action, rec.UniqueKey), rec.IdempotencyKey, "", ""))
	}
	if prunable(rec) {
		dst = append(dst, a.pruneKey(prefixPruneFull, rec, sc))
	}
	return dst
}

// staleIndexKeys is every index key the stored rec may have: indexKeys, plus
// the stub entry (k/) that Prune gives it in place of f/ when it stubs it. A
// stored record does not say whether it is a stub, so overwriting one deletes
// both; the extra tombstone is only paid when a final record is overwritten.
func staleIndexKeys(dst [][]byte, rec *schemas.Record, sc string, a *keyArena) [][]byte {
	dst = indexKeys(dst, rec, sc, a)
	if prunable(rec) {
		dst = append(dst, a.pruneKey(prefixPruneStub, rec, sc))
	}
	return dst
}

// keyArena holds a batch's record and index keys, each built in place in
// a shared buffer: a Pebble batch copies the keys it is given, and the
// table a restore writes keeps them until written, so none needs a heap
// object of its own. Building each as strings and converting them was
// about ten allocations per new key at commit (round 12 (commit)).
//
// The zero arena gives each key a buffer of its own, for a caller that
// builds a few.
type keyArena struct {
	b     []byte
	chunk int // size of the arena's buffers; 0: one per key
}

// keyArenaChunk is the largest size of a batch's arena buffers: about 200
// new keys' record and prune entries.
const keyArenaChunk = 16 << 10

// arenaChunk sizes the batch's key arena buffers to its records' keys (a
// record, its index entries and, when it overwrites one, the old entries:
// about four keys of its scope's length), at most keyArenaChunk. A fixed
// 16 KiB was allocated by every batch with a record, and a transaction of
// one command (commands one at a time) built two small keys in it: a fifth
// of the bytes serve allocated per command, and of its garbage
// collections (BENCHMARKS.md, "Round 14 (latency)").
func (b *Batch) arenaChunk() int {
	n := 0
	for key := range b.records {
		if n += 4 * (len(key) + 32); n >= keyArenaChunk {
			return keyArenaChunk
		}
	}
	return n
}

// room is an empty slice with room for n bytes in the arena.
func (a *keyArena) room(n int) []byte {
	if cap(a.b)-len(a.b) < n {
		a.b = make([]byte, 0, max(n, a.chunk))
	}
	return a.b[len(a.b):len(a.b)]
}

// keep takes k, written into room(n), out of the arena's free room.
func (a *keyArena) keep(k []byte, n int) []byte {
	if len(k) <= n { // else k outgrew its room, and was moved out of a
		a.b = a.b[:len(a.b)+len(k)]
	}
	return k[:len(k):len(k)]
}

// join is the key w+x+y+z.
func (a *keyArena) join(w, x, y, z string) []byte {
	n := len(w) + len(x) + len(y) + len(z)
	k := append(append(append(append(a.room(n), w...), x...), y...), z...)
	return a.keep(k, n)
}

// pruneKey is pruneIndexKey(prefix, rec) of a record whose scope is sc.
func (a *keyArena) pruneKey(prefix string, rec *schemas.Record, sc string) []byte {
	n := len(prefix) + tsWidth + 1 + len(sc)
	k := appendPruneTS(append(a.room(n), prefix...), *rec.FinishedAt)
	return a.keep(append(append(k, '/'), sc...), n)
}

// HoldsUnique reports whether rec counts against its unique_by tuple
// (docs/configuration.md): in_progress, succeeded, unresolved or held, and not released. Age
// (dedupe_retention) is the reader's check: the index is not rewritten when
// a record grows old.
func HoldsUnique(rec *schemas.Record) bool {
	if rec.UniqueKey == "" || rec.Release != nil {
		return false
	}
	switch rec.Status {
	case schemas.StatusInProgress, schemas.StatusSucceeded, schemas.StatusUnresolved, schemas.StatusHeld:
		return true
	}
	return false
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// Close discards the batch if it was not committed. It is idempotent.
func (b *Batch) Close() {
	b.done = true
	b.records, b.entities, b.progress, b.pending, b.recs, b.states = nil, nil, nil, nil, nil, nil
	if b.it != nil {
		_ = b.it.Close()
		b.it = nil
		b.s.leave() // entered by iter
	}
}

// iter is the batch's one point-lookup iterator, opened at its first read:
// creating and closing an iterator cost more than the seek itself (a
// restore reads the previous version of every key it writes). Its view is
// that of its first read, which is enough: the keys and entities of a
// batch belong to one partition, whose batches are committed one after
// another (see Batch).
func (b *Batch) iter() (*pebble.Iterator, error) {
	if b.it == nil {
		// The iterator lives until Close: the batch is inside the store
		// until then, and the store's Close waits for it.
		if err := b.s.enter(); err != nil {
			return nil, err
		}
		if err := b.s.usable(); err != nil {
			b.s.leave()
			return nil, err
		}
		it, err := b.s.db.NewIter(&pointIterOptions)
		if err != nil {
			b.s.leave()
			return nil, fmt.Errorf("dedupe: new iterator: %w", err)
		}
		b.it = it
	}
	return b.it, nil
}

// lookupPrev reads a key's committed record through the batch's iterator.
func (b *Batch) lookupPrev(key string) (schemas.Record, bool, error) {
	it, err := b.iter()
	if err != nil {
		return schemas.Record{}, false, err
	}
	var rec schemas.Record
	rk := recordKey(key)
	found, err := b.s.seekRaw(it, rk, func(val []byte) error {
		var err error
		if rec, err = schemas.UnmarshalRecord(val); err != nil {
			return fmt.Errorf("dedupe: decode %q: %w", rk, err)
		}
		return nil
	})
	return rec, found, err
}

// entityState is an entity's committed state: from the cache, or read
// through the batch's iterator.
func (b *Batch) entityState(entity string) (EntityState, error) {
	seen := b.seenEntity(entity) // before the cache, as in PutRecordBytes
	if en, ok := b.s.entities.get(entity); ok {
		return en.es, nil
	}
	if !seen {
		return EntityState{}, nil
	}
	it, err := b.iter()
	if err != nil {
		return EntityState{}, err
	}
	var es EntityState
	ek := entityKey(entity)
	_, err = b.s.seekRaw(it, ek, func(val []byte) error {
		if err := decodeEntity(val, &es); err != nil {
			return fmt.Errorf("dedupe: decode %q: %w", ek, err)
		}
		return nil
	})
	return es, err
}
