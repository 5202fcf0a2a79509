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
//	r/<scope>                           record, JSON of schemas.Record (its value in a blob file: valueSeparation)
//	e/<entity>                          EntityState, binary (entity.go; JSON in older stores)
//	p/<partition, 10 digits>            Progress, JSON
//	s/<status>/<scope>                  status index, empty value; none for succeeded (ByStatus)
//	u/<partition, 10 digits>/<scope>    unresolved-by-partition index, empty value
//	f/<finished_at, 19 digits>/<scope>  prune index: a full final record, empty value
//	k/<finished_at, 19 digits>/<scope>  prune index: a stub (key only), empty value
//	b/<entity'>\x00<action'>\x00<unique key>\x00<key>
//	                                    unique_by index (docs/configuration.md), empty value
//	m/prune                             prune index state (upgrade backfill), JSON
//	m/format                            key layout version (formatVersion)
//	m/journal                           the journal the store caches (BindJournal), JSON
//
// An idempotency key is scoped to its entity (docs/events.md#execution-records), so a record is
// stored under its scope: <key>\x00<entity'>, where entity' is the entity
// with 0x01 written as 0x01 0x02 and 0x00 as 0x01 0x01 (escapeName, which
// keeps names in order). A key is printable UTF-8 (no 0x00, checked at
// decode), so the first 0x00 ends the key and a prefix scan of
// "r/<key>\x00" reads exactly the records of that key, in entity order:
// LookupKey needs no index of its own. (Format 2 stored <entity'>\x00<key>
// and kept an x/<key>\x00<entity'> entry per record for LookupKey, one more
// entry for every compaction to rewrite; nothing reads an entity's records
// by prefix.)
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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/blob"
	"github.com/cockroachdb/pebble/v2/sstable/block"
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

// Value separation: a record's value (JSON of schemas.Record, ~430 bytes
// plus the command's data) goes to a blob file when its memtable is
// flushed, and the sstables keep only its key and a handle. Compactions
// then move keys and handles, not records: with keys spread evenly over
// the key space (every new-key drain and every restore) each L0 → Lbase
// compaction rewrote the whole overlapping Lbase, records included, and
// compactions and flushes were ~22–26 % of the executor's CPU draining new
// keys (BENCHMARKS.md, round 7 (cpu) and round 8 (valsep)).
//
// Only records are separated (recordSpanPolicy): the other values are
// empty index entries or small states read on every command (entity,
// Progress), which a blob file would cost an extra block read.
//
// The store was at FormatNewest (FormatValueSeparation) before this was
// enabled, so a store written without separation opens unchanged: its
// tables keep their values in place until compactions rewrite them.
const (
	// valueSepMinimumSize is below every full record (~430 bytes without
	// data), so that each is separated; stubs (prune.go, ~300 bytes) mostly
	// are too.
	valueSepMinimumSize = 256
	// valueSepMaxRefDepth bounds how many overlapping blob files one table
	// may reference before a compaction rewrites the values into new blob
	// files. A lookup reads one value from one blob file whatever the
	// depth, so the depth trades locality and files open against rewrites:
	// with keys spread evenly every L0 → Lbase compaction adds the depth of
	// each L0 sublevel, and at Pebble's usual 10 the records were
	// rewritten every few compactions (95 of 231 MB compacted writing
	// 300 000 records; 32 of 133 MB at 50, with l0CompactionThreshold).
	// Writing 1 000 000 keys spread evenly, 50 still rewrites a fifth of
	// the records (195 MB); 1 000 rewrote none, for ~18 % less CPU per
	// record in-process but none seen in the executor, and listings by
	// status read 2–5× slower: without rewrites, records adjacent in key
	// order are spread over every flush's blob file (BENCHMARKS.md,
	// round 10 (write)).
	valueSepMaxRefDepth = 50
	// valueSepRewriteAge and valueSepGarbageRatio let Pebble rewrite a blob
	// file once a fifth of its values are unreferenced (records Prune
	// stubbed or forgot, compacted away) and it is older than a few
	// minutes: space amplification stays bounded with pruning (a blob file
	// whose values are all unreferenced is deleted without a rewrite).
	valueSepRewriteAge   = 5 * time.Minute
	valueSepGarbageRatio = 0.2
)

// valueSeparation is the store's pebble.ValueSeparationPolicy.
func valueSeparation() pebble.ValueSeparationPolicy {
	return pebble.ValueSeparationPolicy{
		Enabled:               true,
		MinimumSize:           valueSepMinimumSize,
		MaxBlobReferenceDepth: valueSepMaxRefDepth,
		RewriteMinimumAge:     valueSepRewriteAge,
		TargetGarbageRatio:    valueSepGarbageRatio,
	}
}

// flushBlockSize is L0's block size, 16 KiB instead of Pebble's 4 KiB.
// Pebble writes a flush's blob file (valueSeparation) with the block size
// of the flush's level, L0, so this is the size of the value blocks that
// hold nearly every record's value. A flush's records are the commands of
// one stretch of the backlog, and repeats of a backlog (or retries soon
// after their command) arrive in about the same order, so one value block
// read answers the repeats of the ~25 records in it instead of ~6 while
// the cache keeps it: draining repeats, block reads per repeat 0.34 →
// 0.09, ~10 % less CPU per repeat, a lower peak RSS, and the flushes'
// blob files are smaller (more of the records' common bytes fall in one
// compression block: −15 % bytes compacted per new key). The trade: a
// lookup of an old key in no order, which the cache does not hold, reads
// and decompresses 16 KiB for one value, 24–30 % more CPU per such lookup
// in-process; 8 KiB cost those nothing more but showed no CPU gain for
// repeats end to end (BENCHMARKS.md, round 15 (repeats)). L0's tables
// (transient) have 16 KiB data blocks too. Blob files that compactions
// write (values rewritten in key order, where neighbours are not read
// together) keep their level's 4 KiB.
const flushBlockSize = 16 << 10

// l0CompactionThreshold is Pebble's L0CompactionThreshold, twice its
// default of 4: with keys spread evenly, each L0 → Lbase compaction
// rewrites the whole overlapping Lbase (the index entries and record keys
// of every key), so fewer, larger compactions write less — writing
// 300 000 records, 231 → 133 MB compacted together with
// valueSepMaxRefDepth, and ~18 % less CPU per new key in the executor
// (BENCHMARKS.md, round 8 (valsep)). The cost is a bloom filter check per
// L0 sublevel on each lookup. l0StopWritesThreshold (Pebble's default 12)
// keeps the same distance above it.
const (
	l0CompactionThreshold = 8
	l0StopWritesThreshold = 24
)

// recordSpan is the key range of records ("r/" up to "r0").
var recordSpan = struct{ start, end []byte }{[]byte(prefixRecord), prefixEnd([]byte(prefixRecord))}

// pruneSpan is the key range of the prune index ("f/" up to "f0").
var pruneSpan = struct{ start, end []byte }{[]byte(prefixPruneFull), prefixEnd([]byte(prefixPruneFull))}

// spanBounds are the keys at which every table ends (recordSpanPolicy), in
// key order.
var spanBounds = [][]byte{pruneSpan.start, pruneSpan.end, recordSpan.start, recordSpan.end}

// recordSpanPolicy separates values only in the record span: everywhere
// else values stay in the sstables (ValueStorageLowReadLatency). Pebble
// calls it for the first key of each output table and ends the table at
// the returned end key.
//
// Tables also end at the prune index's bounds. Its keys begin with the
// record's finish time, so a flush's prune entries are newer than every
// stored one; in a table of their own they overlap at most the last prune
// table of Lbase, whereas in one table with the entity and progress
// entries (keys spread over e/ and p/, on both sides of f/) they made
// every L0 → Lbase compaction rewrite the whole stored prune index, the
// largest part of the index (47 of the ~74 bytes of keys per record).
func recordSpanPolicy(start []byte) (pebble.SpanPolicy, []byte, error) {
	pol := pebble.SpanPolicy{ValueStoragePolicy: pebble.ValueStorageLowReadLatency}
	if bytes.Compare(start, recordSpan.start) >= 0 && bytes.Compare(start, recordSpan.end) < 0 {
		pol = pebble.SpanPolicy{}
	}
	for _, b := range spanBounds {
		if bytes.Compare(start, b) < 0 {
			return pol, b, nil
		}
	}
	return pol, nil, nil
}

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
	prefixUnique     = "b/"
	keyPruneMeta     = "m/prune"
	keyFormat        = "m/format"
	keyJournal       = "m/journal"
)

// formatVersion is the key layout this build writes: 3 stores records
// key-first and has no x/ index. A store without it (or with another) was
// written by an older build (none: keys not scoped to their entity; 2:
// entity-first records and an x/ index); Open empties it and restore
// replays the journal into the new layout (the store is a cache of the
// journal).
const formatVersion = "3"

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
	// SealNote and SealOffset are the partition's last journal seal that
	// was trusted when the progress was stored (signed journals only):
	// the executor's own, or one its restore checked. A restore's seal
	// gate goes on after it (trustlog.NewSealGateAfter), so a copy of an
	// older signed transaction appended while the executor was stopped is
	// refused as it would be while it runs. Empty: a fresh gate.
	SealNote   string `json:"seal_note,omitempty"`
	SealOffset int64  `json:"seal_offset,omitempty"`
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
	// corruption is the DataCorruption handler of the store's Pebble
	// event listener (corrupt.go), also called for damage Pebble returns
	// without reporting it (reportCorrupt). dir is the store's directory.
	corruption func(pebble.DataCorruptionInfo)
	dir        string

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
	// ingest is where CommitIngest writes its tables (restore.go).
	ingest ingestFiles
	// points are the iterators Lookup reuses (points.go).
	points pointIters
	// recWrites counts the writes of record keys, for the records
	// Prefetch read ahead (prefetch.go).
	recWrites recordWrites
	// present is the filter of record keys that lets a lookup of a key
	// never written skip Pebble (presence.go). Set by open, then fixed;
	// trusted once its scan of the stored keys has ended.
	present *presence
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
	// noValueSep (tests) opens the store as builds before value separation
	// did, to write a store in their layout.
	noValueSep bool
	// presenceBytes caps the presence filter (presence.go); tests set it
	// lower to reach the cap.
	presenceBytes int64
	// presenceHold (tests) holds the presence filter's scan until closed.
	presenceHold chan struct{}
	// flushBlock is L0's block size: flushBlockSize unless a benchmark
	// compares another.
	flushBlock int
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
	// PresenceBytes caps the presence filter (presence.go).
	PresenceBytes int64
}

// CMemory is what Pebble holds now in C memory in a cgo build (Go heap
// without cgo): the blocks in the cache and the memtables, with those
// flushed but still read or kept for the next one. 0 once closed.
func (s *Store) CMemory() int64 {
	if s.enter() != nil {
		return 0
	}
	defer s.leave()
	m := s.db.Metrics()
	return m.BlockCache.Size + int64(m.MemTable.Size+m.MemTable.ZombieSize)
}

// Limits reports the memory bounds the store was opened with.
func (s *Store) Limits() Limits { return s.limits }

// PresenceBytes is the memory the presence filter holds now (its bits:
// it grows by generations up to Limits.PresenceBytes and never shrinks).
func (s *Store) PresenceBytes() int64 { return s.present.sizeBytes() }

// PresenceReady reports whether the background scan of the keys stored at
// Open has ended and added every one of them to the presence filter, so
// that a caller timing lookups (the bench's repeat floor) can leave the
// scan's CPU out. Lookups are correct either way: until then they seek.
func (s *Store) PresenceReady() bool { return s.present.ready.Load() }

// WithLogger routes Pebble's messages to l (default: discarded). Pebble's
// informational messages (WAL replay on every open) go to Debug.
func WithLogger(l *slog.Logger) Option {
	return func(c *Settings) { c.logger = l }
}

// Open opens or creates the index in dir.
func Open(dir string, opts ...Option) (*Store, error) {
	cfg := Settings{cacheSize: DefaultCacheSize, presenceBytes: presenceMaxBytes, flushBlock: flushBlockSize}
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
	if err != nil && corrupted(err) {
		if !cfg.rebuild {
			if !errors.Is(err, ErrCorrupt) {
				err = fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
			return nil, err
		}
		if err := moveAside(dir, &cfg, err); err != nil {
			return nil, err
		}
		s, err = open(dir, &cfg)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func open(dir string, cfg *Settings) (*Store, error) {
	if err := checkCorruptMarker(cfg.FS, dir); err != nil {
		return nil, err
	}
	fail := newFailure()
	listener := corruptionListener(cfg, dir, fail)
	po := &pebble.Options{
		// DefaultComparer.Split returns len(key): prefix == whole key. Lookup
		// depends on that; a custom comparer must keep it.
		Comparer:  pebble.DefaultComparer,
		CacheSize: cfg.cacheSize,
		// Stated, not inherited (docs/memory.md): memtables live in the
		// cache's reservation, so the cache size bounds both.
		MemTableSize:                uint64(cfg.memTable),
		MemTableStopWritesThreshold: memTables,
		L0CompactionThreshold:       l0CompactionThreshold,
		L0StopWritesThreshold:       l0StopWritesThreshold,
		// Without a Logger Pebble prints WAL replay lines to stderr on open.
		Logger: pebbleLogger{cfg.logger, fail},
		// The directory is a rebuildable cache, never read by an older
		// binary, so use the newest stable format (columnar blocks).
		FormatMajorVersion: pebble.FormatNewest,
		// A pointer: Pebble compares the file system an ingested table
		// was written with to its own (== on interfaces) to link the
		// table rather than copy it, and a struct holding a func is not
		// comparable (restore's CommitIngest writes with this one).
		FS:            &blobCheckFS{FS: cfg.FS, damaged: listener.DataCorruption},
		EventListener: listener,
	}
	if !cfg.noValueSep {
		po.Experimental.ValueSeparationPolicy = valueSeparation
		po.Experimental.SpanPolicyFunc = recordSpanPolicy
	}
	// L0 defaults to no filter; set every level explicitly so L0 rejects
	// misses too, and L6 (where almost all keys live) has a filter to use.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
		po.Levels[i].Compression = tableCompression
	}
	po.Levels[0].BlockSize = cfg.flushBlock
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("dedupe: open %s: %w", dir, err)
	}
	s := &Store{db: db, log: cfg.logger, fail: fail, corruption: listener.DataCorruption, dir: dir, entities: newGenCache[entityEntry](cfg.entries), metas: newGenCache[recMeta](cfg.entries),
		limits: Limits{CacheBytes: cfg.cacheSize, MemTableBytes: memTables * cfg.memTable, EntryCacheEntries: 4 * cfg.entries, PresenceBytes: cfg.presenceBytes}}
	// Ingested tables are written through Pebble's own file system, so it
	// links them instead of copying (blobCheckFS).
	s.ingest.fs, s.ingest.dir = po.FS, dir
	s.points.slots = make(chan struct{}, maxPointIters)
	s.recWrites.seed = maphash.MakeSeed()
	s.points.idle = time.AfterFunc(pointIterIdle, s.dropIdlePointIters)
	s.points.idle.Stop()
	if err := s.checkFormat(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.loadPruneState(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.startPresence(cfg.presenceBytes, cfg.presenceHold); err != nil {
		db.Close()
		return nil, err
	}
	s.logTree("dedupe: opened")
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
	s.points.idle.Stop()
	s.dropPointIters()
	s.logTree("dedupe: closing")
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

// Lookup returns the record of an idempotency key, if any. It sees every
// write to the store that returned before it was called.
//
// It is one point lookup. It uses an iterator with UseL6Filters and
// SeekPrefixGE rather than db.Get because db.Get does not consult the bloom
// filter of the bottom level, where nearly all keys live: for a miss (every
// new key) it reads an index and a data block, ~3.7x slower (measured on these machines).
// The iterator is reused while nothing was written (points.go).
func (s *Store) Lookup(entity, key string) (schemas.Record, bool, error) {
	rec, _, found, err := s.LookupBytes(entity, key)
	return rec, found, err
}

// LookupBytes is Lookup that also returns the record's stored bytes: the
// journal value it was written from, which a repeat's outcome replays as
// they are instead of encoding the record again (docs/events.md). The
// record's strings and data point into them, so neither may be changed.
func (s *Store) LookupBytes(entity, key string) (schemas.Record, []byte, bool, error) {
	if err := s.enter(); err != nil {
		return schemas.Record{}, nil, false, err
	}
	defer s.leave()
	return s.lookupKeyBytes(nil, appendRecordKey(nil, entity, key))
}

// LookupKey returns the records of key for every entity that used it
// (normally one), in entity order: a prefix scan of "r/<key>\x00", since
// records are stored key-first. Operators ask for a key without knowing
// its entity (GET /v1/executions/{key}).
func (s *Store) LookupKey(key string) ([]schemas.Record, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return nil, err
	}
	lower := recordKey(key + "\x00")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return nil, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	defer it.Close()
	var out []schemas.Record
	for ok := it.First(); ok; ok = it.Next() {
		rec, err := s.iterRecord(it)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("dedupe: scan key %q: %w", key, s.reportCorrupt(err))
	}
	return out, nil
}

// iterRecord decodes the record at it's position (a key in r/). Damage it
// meets fails the store (reportCorrupt, recoverBlobPanic).
func (s *Store) iterRecord(it *pebble.Iterator) (_ schemas.Record, err error) {
	defer s.recoverBlobPanic(&err)
	val, err := it.ValueAndErr()
	if err != nil {
		return schemas.Record{}, fmt.Errorf("dedupe: read %q: %w", it.Key(), s.reportCorrupt(err))
	}
	rec, err := schemas.UnmarshalRecordKeep(bytes.Clone(val))
	if err != nil {
		return schemas.Record{}, fmt.Errorf("dedupe: decode %q: %w", it.Key(), err)
	}
	return rec, nil
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

// lookupKey reads the record stored under record key rk, in src, or with
// a nil src in the store as it is now through a reused iterator
// (getPointIter). It is the executor's lookup of every command's key, so
// it seeks and decodes without a callback (whose closure, and the record
// it wrote to, escaped to the heap on every call).
func (s *Store) lookupKey(src iterSource, rk []byte) (schemas.Record, bool, error) {
	rec, _, found, err := s.lookupKeyBytes(src, rk)
	return rec, found, err
}

// lookupKeyBytes is lookupKey that also returns the value the record was
// decoded from (and points into).
func (s *Store) lookupKeyBytes(src iterSource, rk []byte) (schemas.Record, []byte, bool, error) {
	if err := s.usable(); err != nil {
		return schemas.Record{}, nil, false, err
	}
	// A key the presence filter never saw was never written: absent
	// from the store now, and from any older snapshot of it.
	if s.present.absent(rk[len(prefixRecord):]) {
		return schemas.Record{}, nil, false, nil
	}
	raw, found, err := s.readValue(src, rk)
	if err != nil || !found {
		return schemas.Record{}, nil, false, err
	}
	rec, err := schemas.UnmarshalRecordKeep(raw)
	if err != nil {
		return schemas.Record{}, nil, false, fmt.Errorf("dedupe: decode %q: %w", rk, err)
	}
	return rec, raw, true, nil
}

// readValue is a copy of the value stored under rk, in src, or with a
// nil src in the store as it is now through a reused iterator, which is
// given back before the value is decoded (the copy is the one the record
// keeps: its strings and data point into it instead of each being copied
// out on its own).
func (s *Store) readValue(src iterSource, rk []byte) ([]byte, bool, error) {
	var it *pebble.Iterator
	var err error
	if src != nil {
		if it, err = src.NewIter(&pointIterOptions); err != nil {
			return nil, false, fmt.Errorf("dedupe: new iterator: %w", err)
		}
		defer it.Close()
	} else {
		var w uint64
		if it, w, err = s.getPointIter(); err != nil {
			return nil, false, err
		}
		defer s.putPointIter(it, w)
	}
	val, found, err := s.seekValue(it, rk)
	return bytes.Clone(val), found, err
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
	// Through a reused iterator (points.go): it sees every write that
	// returned before the call, as a new one would, and a commit the
	// read overlaps puts its state into the cache after it counted its
	// write (Batch.finish), so putIfQuiet below refuses this read then.
	it, w, err := s.getPointIter()
	if err != nil {
		return EntityState{}, false, err
	}
	found, err := s.seekRaw(it, ek, func(val []byte) error {
		if err := decodeEntity(val, &es); err != nil {
			return fmt.Errorf("dedupe: decode %q: %w", ek, err)
		}
		return nil
	})
	s.putPointIter(it, w)
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
	return s.seekRaw(it, key, use)
}

// seekRaw is getRaw on an open iterator.
func (s *Store) seekRaw(it *pebble.Iterator, key []byte, use func(val []byte) error) (bool, error) {
	val, found, err := s.seekValue(it, key)
	if err != nil || !found || use == nil {
		return found, err
	}
	if err := use(val); err != nil {
		return false, err
	}
	return true, nil
}

// reportCorrupt fails the store and marks its directory (as Pebble's
// DataCorruption event does, corrupt.go) when err is Pebble's corruption
// error, and returns err. Pebble v2.1.7 reports a damaged block of a table
// to the event listener, but a damaged value block of a blob file only as
// the read's error: without this the store would go on answering, and the
// next start would not rebuild it. Reporting twice is harmless.
func (s *Store) reportCorrupt(err error) error {
	if err != nil && pebble.IsCorruptionError(err) {
		s.corruption(pebble.DataCorruptionInfo{Path: s.dir, Details: err})
	}
	return err
}

// recoverBlobPanic, deferred by the calls that read records' values,
// turns Pebble v2.1.7's panic on a blob file it cannot open (a live blob
// file missing from the directory: Pebble's Open checks tables, not blob
// files, and its report of the failure has no case for blob files,
// "unknown metadata type: <nil>") into the store's failure, as for
// damage (reportCorrupt): the next start rebuilds instead of panicking
// again on the same read. Any other panic goes on.
func (s *Store) recoverBlobPanic(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if msg, ok := r.(string); !ok || !strings.HasPrefix(msg, "unknown metadata type") {
		panic(r)
	}
	e := fmt.Errorf("dedupe: a blob file could not be opened (missing or damaged): pebble: %s", r)
	s.corruption(pebble.DataCorruptionInfo{Path: s.dir, Details: e})
	*err = e
}

// blobCheckFS checks each blob file (value separation) when Pebble opens
// it for reading: its footer and index block, the parts Pebble reads when
// it opens the file. Pebble v2.1.7 panics ("unknown metadata type") when
// that open of a blob file fails with a corruption error — a damaged
// footer or a live blob file gone missing — where a damaged table is an
// error it reports. Found here, the damage is reported to damaged (the
// store fails, the next start rebuilds) and Open returns an error that is
// not marked as corruption, which Pebble passes to the read (or the
// compaction) instead of panicking. Blob files are opened for reading only
// once they are complete (a file being written is Created), and the file
// cache keeps them open: one footer and index read per blob file opened.
type blobCheckFS struct {
	vfs.FS
	damaged func(pebble.DataCorruptionInfo)
}

// Unwrap is the file system it checks for.
func (fs blobCheckFS) Unwrap() vfs.FS { return fs.FS }

func (fs blobCheckFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if !strings.HasSuffix(name, ".blob") {
		return f, err
	}
	if err == nil {
		err = checkBlobFile(fs.FS, name)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err // not damage: an I/O error, permissions, ...
	}
	if err == nil {
		return f, nil
	}
	if f != nil {
		_ = f.Close()
	}
	fs.damaged(pebble.DataCorruptionInfo{Path: name, Details: err})
	// %v, not %w: a corruption (or not-exist) mark would reach Pebble's panic.
	return nil, fmt.Errorf("dedupe: blob file %s damaged: %v", name, err)
}

// checkBlobFile reads a blob file's footer and index block, verifying
// their checksums. Errors other than damage (I/O) are returned as they are.
func checkBlobFile(fs vfs.FS, name string) error {
	f, err := fs.Open(name, vfs.RandomReadsOption)
	if err != nil {
		return err
	}
	r, err := objstorageprovider.NewFileReadable(f, fs, objstorageprovider.NewReadaheadConfig(), name)
	if err != nil {
		return errors.Join(err, f.Close())
	}
	ctx := context.Background()
	fr, err := blob.NewFileReader(ctx, r, blob.FileReaderOptions{})
	if err != nil {
		return errors.Join(err, r.Close())
	}
	h, err := fr.ReadIndexBlock(ctx, block.NoReadEnv, nil)
	if err == nil {
		h.Release()
	}
	return errors.Join(err, fr.Close())
}

// seekValue positions it on key and returns its value, the iterator's
// buffer (valid until it moves or closes). Damage it meets fails the
// store (reportCorrupt, recoverBlobPanic).
func (s *Store) seekValue(it *pebble.Iterator, key []byte) (_ []byte, _ bool, err error) {
	defer s.recoverBlobPanic(&err)
	// With Split == len(key), a valid position after SeekPrefixGE already
	// means the exact key; the comparison guards against a comparer change.
	if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, false, fmt.Errorf("dedupe: read %q: %w", key, s.reportCorrupt(err))
		}
		return nil, false, nil
	}
	val, err := it.ValueAndErr()
	if err != nil {
		return nil, false, fmt.Errorf("dedupe: read %q: %w", key, s.reportCorrupt(err))
	}
	return val, true, nil
}

// recordKey is the record key of scope sc.
func recordKey(sc string) []byte { return []byte(prefixRecord + sc) }

// appendRecordKey appends the record key of (entity, key), built in one
// buffer rather than through scope's string and a conversion.
func appendRecordKey(b []byte, entity, key string) []byte {
	if b == nil {
		b = make([]byte, 0, len(prefixRecord)+len(key)+1+len(entity))
	}
	b = append(b, prefixRecord...)
	b = append(b, key...)
	b = append(b, 0)
	return append(b, escapeName(entity)...)
}

// recordKeyOf is the record key of rec.
func recordKeyOf(rec *schemas.Record) []byte { return recordKey(scopeOf(rec)) }

// scope is the storage form of (entity, key): see the package comment.
func scope(entity, key string) string { return key + "\x00" + escapeName(entity) }

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
	p.fatal(msg)
	panic(fatalPanic{"dedupe: pebble fatal: " + msg})
}

// fatal logs a fatal Pebble error and marks the store failed: what Fatalf
// does before it panics, for the errors Pebble returns instead of
// reporting them through Fatalf (Batch.CommitSyncLater's sync).
func (p pebbleLogger) fatal(msg string) {
	p.l.Error(msg, "component", "pebble", "fatal", true)
	p.fail.set(msg)
}
