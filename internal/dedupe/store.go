// Package dedupe is the local index of execution records: a Pebble database
// that answers "have I seen this idempotency key?" for the partitions this
// instance owns.
//
// The index is a cache. The journal topic is the source of truth (docs/events.md#execution-records,
// G5): every record written here was first, or is in the same step, appended
// to the journal, and a lost or deleted data directory is rebuilt by replaying
// the journal from the offset stored in Progress. That is why nothing here is
// replicated, and why a partition that moves away keeps its data here.
//
// Key layout (one Pebble keyspace, prefixes keep the kinds apart):
//
//	r/<scope>                           record, JSON of schemas.Record
//	e/<entity>                          EntityState, binary (entity.go; JSON in older stores)
//	p/<partition, 10 digits>            Progress, JSON
//	s/<status>/<scope>                  status index, empty value
//	u/<partition, 10 digits>/<scope>    unresolved-by-partition index, empty value
//	f/<finished_at, 19 digits>/<scope>  prune index: a full final record, empty value
//	k/<finished_at, 19 digits>/<scope>  prune index: a stub (key only), empty value
//	x/<key>\x00<entity'>                records of a key, whatever the entity, empty value
//	b/<entity'>\x00<action'>\x00<unique key>\x00<key>
//	                                    unique_by index (docs/configuration.md), empty value
//	m/prune                             prune index state (upgrade backfill), JSON
//	m/format                            key layout version (formatVersion)
//
// An idempotency key is scoped to its entity (docs/events.md#execution-records), so a record is
// stored under its scope: <entity'>\x00<key>, where entity' is the entity
// with 0x01 written as 0x01 0x02 and 0x00 as 0x01 0x01 (escapeName). An
// escaped name has no 0x00, and a key is printable UTF-8 (no 0x00, checked
// at decode), so the first 0x00 ends the entity and a prefix scan of
// "<entity'>\x00" sees exactly that entity's keys.
//
// finished_at in the prune index is Unix nanoseconds, zero-padded, so the
// index sorts by age and Prune reads only the entries that are due (prune.go).
//
// The comparer is Pebble's default, whose Split returns the whole key: the
// bloom-filter "prefix" of a key is the key itself, so a SeekPrefixGE on
// "r/<key>" is an exact point lookup that the filters of every level,
// including L6, can reject without reading a data block.
package dedupe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/onceflight/onceflight/schemas"
)

// ErrClosed is returned by calls on a Store after Close.
var ErrClosed = errors.New("dedupe: store closed")

// DefaultCacheSize is the block cache size when WithCacheSize is not given.
// Measured on these machines: with Pebble's 8 MB default, point reads are pread-bound; the hot
// part of a partition's index should fit in memory.
const DefaultCacheSize = 64 << 20

// tableCompression is MinLZ instead of Pebble's default, Snappy: every
// record is compressed by its flush and again by each compaction that
// rewrites it, and read back (decompressed) by the next compaction, and
// Snappy's encoder and decoder were ~11 % of the executor's CPU draining a
// backlog of new keys. On amd64 MinLZ encodes these blocks ~1.5× and
// decodes them ~2× as fast, and smaller (BENCHMARKS.md, round 7). A block
// names its compression, so tables written with Snappy before stay
// readable.
func tableCompression() *sstable.CompressionProfile { return sstable.MinLZCompression }

// bloomBitsPerKey gives a ~1% false-positive rate. Most lookups are misses
// (new keys), so the filter is what keeps a miss off the disk.
const bloomBitsPerKey = 10

// Key prefixes; see the package comment.
const (
	prefixRecord     = "r/"
	prefixEntity     = "e/"
	prefixProgress   = "p/"
	prefixStatus     = "s/"
	prefixUnresolved = "u/"
	prefixPruneFull  = "f/"
	prefixPruneStub  = "k/"
	prefixByKey      = "x/"
	prefixUnique     = "b/"
	keyPruneMeta     = "m/prune"
	keyFormat        = "m/format"
)

// formatVersion is the key layout this build writes. A store without it
// (or with another) was written by a build whose keys were not scoped to
// their entity; Open empties it and restore replays the journal into the
// new layout (the store is a cache of the journal).
const formatVersion = "2"

// EntityState is what the executor needs about an entity before it runs a
// command for it: the version for optimistic checks, and whether an execution
// may still be in flight (G1).
type EntityState struct {
	// Version is the highest EntityVersion of a succeeded record.
	Version int64 `json:"version"`
	// Partition is the partition of the entity's latest record.
	Partition int32 `json:"partition"`
	// LastKey is the idempotency key of the latest record written for the
	// entity, whatever its status.
	LastKey string `json:"last_key"`
	// InFlightKey is the key of an in_progress execution, "" if none. A new
	// owner settles it before other work on the entity, waiting for the
	// deadline in its record (the record, not a copy here, is what the
	// journal restores and what the wait must follow).
	InFlightKey string `json:"in_flight_key,omitempty"`
}

// Progress is how far the index has consumed the journal of one partition.
// It is written in the same batch as the records it covers, so after a crash
// the index and its position agree and replay resumes exactly there.
type Progress struct {
	// JournalOffset is the next journal offset to read; 0 if none was read.
	JournalOffset int64 `json:"journal_offset"`
	// Epoch is the owner epoch that wrote the latest record.
	Epoch int64 `json:"epoch"`
	// LastHash is the hash of the latest record, the next record's prev_hash.
	LastHash string `json:"last_hash"`
	// TokenSeq is the last fencing-token sequence handed out.
	TokenSeq int64 `json:"token_seq"`
}

// Store is the Pebble-backed index. Its methods are safe for concurrent use;
// a Batch is not (see NewBatch).
type Store struct {
	db     *pebble.DB
	log    *slog.Logger
	closed atomic.Bool
	// inside counts the calls running in the store, and the batches that
	// hold an iterator: Close waits for it to reach 0 (enter, leave).
	inside atomic.Int64
	// fail is set once, by Pebble's Fatalf or its DataCorruption event on
	// whichever goroutine met the failure, and read (atomically) by every
	// call (failure.go). The pointer itself is fixed by Open.
	fail *failure

	// mu orders Prune's check-and-write against Batch.Commit: Prune re-reads
	// a record and writes its stub or deletion while holding mu, and Commit
	// holds mu while it applies a batch, so a pruning write never lands on
	// top of a record committed after Prune looked at it. It also guards the
	// prune cursors in prune. Lock order: DESIGN.md#lock-order.
	mu sync.Mutex
	// pruneMu serializes Prune calls; taken before mu.
	pruneMu sync.Mutex
	prune   pruneState
	// entities and metas are write-through caches (cache.go).
	entities *genCache[entityEntry]
	metas    *genCache[recMeta]
	limits   Limits
	// pruneHook, if set (tests), runs in Prune after a chunk was scanned
	// and before it is checked and written under mu.
	pruneHook func()
	// entityReadHook, if set (tests, before the reads it pauses begin),
	// runs in Entity between its Pebble read and caching what it read.
	entityReadHook func(entity string)
}

// Settings is what Options set for Open.
type Settings struct {
	// FS is the file system the store opens on; nil (always, outside
	// tests) is the operating system's. The tests open stores on a disk
	// that fails on demand (internal/diskfault) with an Option literal:
	// func(s *dedupe.Settings) { s.FS = disk.FS }.
	FS vfs.FS

	cacheSize int64
	memTable  int64 // bytes of one memtable
	entries   int   // entries of each in-memory cache generation (cache.go)
	logger    *slog.Logger
	rebuild   bool // WithRebuildOnCorruption
}

// Option configures Open.
type Option func(*Settings)

// WithCacheSize sets the block cache size in bytes (default DefaultCacheSize).
//
// Pebble charges its memtables (4 MiB each by default) to this cache, split
// over shards: measured here, an 8 MiB cache kept no block at all (every read
// a cache miss), so sizes below ~32 MiB buy nothing.
func WithCacheSize(bytes int64) Option {
	return func(c *Settings) { c.cacheSize = bytes }
}

// DefaultMemTableSize is the size of one Pebble memtable when
// WithMemTableSize is not given and the cache is at least 8 times as
// large (with a smaller cache: an eighth of it, at least 1 MiB), set
// explicitly so the index's memory is stated rather than inherited
// (docs/memory.md). Up to memTables of them exist at once (one being
// written, the others being flushed), reserved inside the block cache, so
// they take at most a quarter of it.
//
// Not Pebble's 4 MiB: every flush of a memtable is a table that the next
// compactions rewrite, and with keys spread evenly over the key space
// (every restore and every new-key drain) twice the memtable meant ~25 %
// less CPU for a restore into an empty data dir (BENCHMARKS.md, issue 24).
const DefaultMemTableSize = 8 << 20

// memTables is Pebble's MemTableStopWritesThreshold: writes stall rather
// than queue a third memtable behind a slow flush.
const memTables = 2

// DefaultEntryCacheEntries is the size of one generation of each of the
// two in-memory caches (entities, record metas: cache.go) when
// WithEntryCache is not given: each holds at most twice this many entries.
const DefaultEntryCacheEntries = 1 << 14

// Limits are the memory bounds the store was opened with.
type Limits struct {
	// CacheBytes is the block cache, which also holds the memtables.
	CacheBytes int64
	// MemTableBytes is the most the memtables take: memtables × size.
	MemTableBytes int64
	// EntryCacheEntries bounds the entries of both in-memory caches
	// together (two caches of two generations).
	EntryCacheEntries int
}

// Limits reports the memory bounds the store was opened with.
func (s *Store) Limits() Limits { return s.limits }

// WithLogger routes Pebble's messages to l (default: discarded). Pebble's
// informational messages (WAL replay on every open) go to Debug.
func WithLogger(l *slog.Logger) Option {
	return func(c *Settings) { c.logger = l }
}

// Open opens or creates the index in dir.
func Open(dir string, opts ...Option) (*Store, error) {
	cfg := Settings{cacheSize: DefaultCacheSize}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.cacheSize <= 0 {
		cfg.cacheSize = DefaultCacheSize
	}
	if cfg.memTable <= 0 {
		cfg.memTable = min(DefaultMemTableSize, max(cfg.cacheSize/8, 1<<20))
	}
	if cfg.memTable < 1<<20 || cfg.memTable > 1<<30 {
		return nil, fmt.Errorf("dedupe: memtable size %d bytes: must be between 1 MiB and 1 GiB", cfg.memTable)
	}
	if cfg.entries <= 0 {
		cfg.entries = DefaultEntryCacheEntries
	}
	if cfg.entries < 1024 {
		return nil, fmt.Errorf("dedupe: entry cache of %d entries: must be at least 1024", cfg.entries)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	s, err := open(dir, &cfg)
	if err == nil || !corrupted(err) {
		return s, err
	}
	if !cfg.rebuild {
		if !errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return nil, err
	}
	if err := moveAside(dir, &cfg, err); err != nil {
		return nil, err
	}
	return open(dir, &cfg)
}

func open(dir string, cfg *Settings) (*Store, error) {
	if err := checkCorruptMarker(cfg.FS, dir); err != nil {
		return nil, err
	}
	fail := newFailure()
	po := &pebble.Options{
		// DefaultComparer.Split returns len(key): prefix == whole key. Lookup
		// depends on that; a custom comparer must keep it.
		Comparer:  pebble.DefaultComparer,
		CacheSize: cfg.cacheSize,
		// Stated, not inherited (docs/memory.md): memtables live in the
		// cache's reservation, so the cache size bounds both.
		MemTableSize:                uint64(cfg.memTable),
		MemTableStopWritesThreshold: memTables,
		// Without a Logger Pebble prints WAL replay lines to stderr on open.
		Logger: pebbleLogger{cfg.logger, fail},
		// The directory is a rebuildable cache, never read by an older
		// binary, so use the newest stable format (columnar blocks).
		FormatMajorVersion: pebble.FormatNewest,
		FS:                 cfg.FS,
		EventListener:      corruptionListener(cfg, dir, fail),
	}
	// L0 defaults to no filter; set every level explicitly so L0 rejects
	// misses too, and L6 (where almost all keys live) has a filter to use.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
		po.Levels[i].Compression = tableCompression
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("dedupe: open %s: %w", dir, err)
	}
	s := &Store{db: db, log: cfg.logger, fail: fail, entities: newGenCache[entityEntry](cfg.entries), metas: newGenCache[recMeta](cfg.entries),
		limits: Limits{CacheBytes: cfg.cacheSize, MemTableBytes: memTables * cfg.memTable, EntryCacheEntries: 4 * cfg.entries}}
	if err := s.checkFormat(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.loadPruneState(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// checkFormat empties a store written in another key layout. Its records
// would be found under the wrong keys; since Progress goes too, restore
// reads each partition's journal from its start, as for a new data dir.
func (s *Store) checkFormat() error {
	var have string
	found, err := s.getRaw(s.db, []byte(keyFormat), func(v []byte) error { have = string(v); return nil })
	if err != nil {
		return err
	}
	if found && have == formatVersion {
		return nil
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("dedupe: new iterator: %w", err)
	}
	empty := !it.First()
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("dedupe: check format: %w", err)
	}
	if !empty {
		s.log.Warn("dedupe: store written with another key layout; emptied, restore rebuilds it from the journal", "found", have, "want", formatVersion)
		if err := s.guard(func() error { return s.db.DeleteRange([]byte{}, []byte{0xff}, pebble.Sync) }); err != nil {
			return fmt.Errorf("dedupe: empty old layout: %w", err)
		}
	}
	if err := s.guard(func() error { return s.db.Set([]byte(keyFormat), []byte(formatVersion), pebble.Sync) }); err != nil {
		return fmt.Errorf("dedupe: write format: %w", err)
	}
	return nil
}

// Close closes the database. Batches not committed are lost, which is safe:
// their journal entries are replayed from Progress on the next start.
//
// Calls that begin after Close return ErrClosed; Close waits for the calls
// already inside the store (and for batches holding an iterator to be
// closed) before it closes Pebble, which would otherwise panic under them
// ("pebble: closed"). A caller shuts down in order — stop the executor and
// its chores, then close the store — so the wait is short; a Prune inside
// is stopped by its context.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	for s.inside.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("dedupe: close: %w", err)
	}
	return nil
}

// enter admits a call into the store, or refuses it (ErrClosed) once Close
// has begun. A call that enters is waited for by Close until it leaves.
// Entering again from inside a call is fine. The counter is raised before
// closed is read, and Close sets closed before it reads the counter, so
// of a call and a Close that race at least one sees the other (Go's
// atomics are sequentially consistent): the call backs out, or Close
// waits for it.
func (s *Store) enter() error {
	s.inside.Add(1)
	if s.closed.Load() {
		s.inside.Add(-1)
		return ErrClosed
	}
	return nil
}

// leave ends a call admitted by enter.
func (s *Store) leave() { s.inside.Add(-1) }

// Lookup returns the record of an idempotency key, if any.
//
// It is one point lookup. It uses an iterator with UseL6Filters and
// SeekPrefixGE rather than db.Get because db.Get does not consult the bloom
// filter of the bottom level, where nearly all keys live: for a miss (every
// new key) it reads an index and a data block, ~3.7x slower (measured on these machines).
func (s *Store) Lookup(entity, key string) (schemas.Record, bool, error) {
	if err := s.enter(); err != nil {
		return schemas.Record{}, false, err
	}
	defer s.leave()
	return s.lookupKey(s.db, appendRecordKey(nil, entity, key))
}

// LookupKey returns the records of key for every entity that used it
// (normally one), in entity order, from the x/ index. Operators ask for a
// key without knowing its entity (GET /v1/executions/{key}).
func (s *Store) LookupKey(key string) ([]schemas.Record, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return nil, err
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	lower := []byte(prefixByKey + key + "\x00")
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return nil, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	defer it.Close()
	var out []schemas.Record
	for ok := it.First(); ok; ok = it.Next() {
		sc := string(it.Key()[len(lower):]) + "\x00" + key
		rec, found, err := s.lookupIn(snap, sc)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, rec)
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("dedupe: scan key %q: %w", key, err)
	}
	return out, nil
}

// UniqueHolders returns the idempotency keys of the entity's records of
// action indexed under uniqueKey (docs/configuration.md unique_by): records that were
// in_progress, succeeded, unresolved or held when written. The caller
// checks each record's current status and age; an index entry only says
// where to look.
func (s *Store) UniqueHolders(entity, action, uniqueKey string) ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return nil, err
	}
	lower := []byte(uniquePrefix(entity, action, uniqueKey))
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return nil, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, string(it.Key()[len(lower):]))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("dedupe: scan unique_by index: %w", err)
	}
	return out, nil
}

// lookupIn reads the record stored under scope sc (see scope).
func (s *Store) lookupIn(src iterSource, sc string) (schemas.Record, bool, error) {
	return s.lookupKey(src, recordKey(sc))
}

// lookupKey reads the record stored under record key rk. It is the
// executor's lookup of every command's key, so it seeks and decodes
// without a callback (whose closure, and the record it wrote to, escaped
// to the heap on every call).
func (s *Store) lookupKey(src iterSource, rk []byte) (schemas.Record, bool, error) {
	if err := s.usable(); err != nil {
		return schemas.Record{}, false, err
	}
	it, err := src.NewIter(&pointIterOptions)
	if err != nil {
		return schemas.Record{}, false, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	defer it.Close()
	val, found, err := seekValue(it, rk)
	if err != nil || !found {
		return schemas.Record{}, false, err
	}
	rec, err := schemas.UnmarshalRecord(val)
	if err != nil {
		return schemas.Record{}, false, fmt.Errorf("dedupe: decode %q: %w", rk, err)
	}
	return rec, true, nil
}

// Entity returns the state of an entity, if any record was written for it.
func (s *Store) Entity(entity string) (EntityState, bool, error) {
	if err := s.enter(); err != nil {
		return EntityState{}, false, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return EntityState{}, false, err
	}
	en, ok, v := s.entities.lookup(entity)
	if ok {
		return en.es, en.found, nil
	}
	var es EntityState
	ek := entityKey(entity)
	found, err := s.getRaw(s.db, ek, func(val []byte) error {
		if err := decodeEntity(val, &es); err != nil {
			return fmt.Errorf("dedupe: decode %q: %w", ek, err)
		}
		return nil
	})
	if err != nil {
		return EntityState{}, false, err
	}
	if s.entityReadHook != nil {
		s.entityReadHook(entity)
	}
	s.entities.putIfQuiet(entity, entityEntry{es: es, found: found}, v)
	return es, found, nil
}

// Progress returns the journal position of a partition; the zero Progress
// (offset 0: replay from the start) if none was stored.
func (s *Store) Progress(partition int32) (Progress, error) {
	if err := s.enter(); err != nil {
		return Progress{}, err
	}
	defer s.leave()
	var p Progress
	if _, err := s.get(s.db, progressKey(partition), &p); err != nil {
		return Progress{}, err
	}
	return p, nil
}

// DropPartition is called when a partition is revoked. It deletes nothing:
// the records stay as a warm cache, so a partition that comes back (the
// common case in a rolling restart) needs only the journal tail since its
// Progress, and whatever was written meanwhile by another owner is
// overwritten by that restore. Stale records are never trusted without
// replaying the journal up to its end first, which is the restorer's job.
func (s *Store) DropPartition(partition int32) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return err
	}
	return nil
}

// iterSource is a *pebble.DB or a *pebble.Snapshot.
type iterSource interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

// pointIterOptions makes a SeekPrefixGE check the L6 bloom filters, which
// iterators skip by default (they expect scans, where filters don't help).
var pointIterOptions = pebble.IterOptions{UseL6Filters: true}

// get reads one key with a prefix seek and decodes its JSON value into v.
func (s *Store) get(src iterSource, key []byte, v any) (bool, error) {
	found, err := s.getRaw(src, key, func(val []byte) error {
		// json.Unmarshal copies, so v does not alias the iterator's buffer.
		if err := json.Unmarshal(val, v); err != nil {
			return fmt.Errorf("dedupe: decode %q: %w", key, err)
		}
		return nil
	})
	return found, err
}

// getRaw reads one key with a prefix seek and hands its value to use, which
// must not keep the slice (it is the iterator's buffer).
func (s *Store) getRaw(src iterSource, key []byte, use func(val []byte) error) (bool, error) {
	if err := s.usable(); err != nil {
		return false, err
	}
	it, err := src.NewIter(&pointIterOptions)
	if err != nil {
		return false, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	defer it.Close()
	return seekRaw(it, key, use)
}

// seekRaw is getRaw on an open iterator.
func seekRaw(it *pebble.Iterator, key []byte, use func(val []byte) error) (bool, error) {
	val, found, err := seekValue(it, key)
	if err != nil || !found || use == nil {
		return found, err
	}
	if err := use(val); err != nil {
		return false, err
	}
	return true, nil
}

// seekValue positions it on key and returns its value, the iterator's
// buffer (valid until it moves or closes).
func seekValue(it *pebble.Iterator, key []byte) ([]byte, bool, error) {
	// With Split == len(key), a valid position after SeekPrefixGE already
	// means the exact key; the comparison guards against a comparer change.
	if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, false, fmt.Errorf("dedupe: read %q: %w", key, err)
		}
		return nil, false, nil
	}
	val, err := it.ValueAndErr()
	if err != nil {
		return nil, false, fmt.Errorf("dedupe: read %q: %w", key, err)
	}
	return val, true, nil
}

// recordKey is the record key of scope sc.
func recordKey(sc string) []byte { return []byte(prefixRecord + sc) }

// appendRecordKey appends the record key of (entity, key), built in one
// buffer rather than through scope's string and a conversion.
func appendRecordKey(b []byte, entity, key string) []byte {
	if b == nil {
		b = make([]byte, 0, len(prefixRecord)+len(entity)+1+len(key))
	}
	b = append(b, prefixRecord...)
	b = append(b, escapeName(entity)...)
	b = append(b, 0)
	return append(b, key...)
}

// recordKeyOf is the record key of rec.
func recordKeyOf(rec *schemas.Record) []byte { return recordKey(scopeOf(rec)) }

// scope is the storage form of (entity, key): see the package comment.
func scope(entity, key string) string { return escapeName(entity) + "\x00" + key }

func scopeOf(rec *schemas.Record) string { return scope(rec.Entity, rec.IdempotencyKey) }

// escapeName makes a name free of 0x00 while keeping distinct names
// distinct and no escaped name a prefix-with-separator of another: 0x01 →
// 0x01 0x02, 0x00 → 0x01 0x01. Entities are almost never touched by it.
func escapeName(s string) string {
	if !strings.ContainsAny(s, "\x00\x01") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case 0:
			b.WriteString("\x01\x01")
		case 1:
			b.WriteString("\x01\x02")
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// uniquePrefix is the b/ prefix of one (entity, action, tuple).
func uniquePrefix(entity, action, uniqueKey string) string {
	return prefixUnique + escapeName(entity) + "\x00" + escapeName(action) + "\x00" + uniqueKey + "\x00"
}

func entityKey(entity string) []byte        { return []byte(prefixEntity + entity) }
func progressKey(p int32) []byte            { return []byte(prefixProgress + partitionString(p)) }
func statusPrefix(st schemas.Status) string { return prefixStatus + string(st) + "/" }
func unresolvedPrefix(p int32) string       { return prefixUnresolved + partitionString(p) + "/" }

// partitionString pads to 10 digits (int32's maximum width) so partitions
// sort numerically in key order.
func partitionString(p int32) string {
	s := strconv.FormatInt(int64(p), 10)
	const width = 10
	if len(s) >= width {
		return s
	}
	return "0000000000"[:width-len(s)] + s
}

// pebbleLogger adapts slog to pebble.Logger.
type pebbleLogger struct {
	l    *slog.Logger
	fail *failure
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf marks the store failed and panics instead of exiting like
// Pebble's default: on a write the panic is recovered by Store.guard and
// becomes the caller's error (failure.go).
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	p.fail.set(msg)
	panic(fatalPanic{"dedupe: pebble fatal: " + msg})
}
