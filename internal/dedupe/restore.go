package dedupe

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// CommitIngest is Commit by another road: the batch's entries are sorted
// into a table that Pebble ingests, instead of being inserted into the
// memtable, logged in the WAL and later flushed to a table of the same
// content. It is for a restore's catch-up, whose large batches are built
// from the journal alone: the memtable inserts, the WAL and the flush were
// a third of its CPU.
//
// What it guarantees is Commit's: when it returns without error the whole
// batch is durable (the table is synced before Pebble links it, and the
// ingestion is logged durably), and a crash leaves all of it or none of it
// (one table, ingested in one step). Its entries get a sequence number
// above everything the store holds, so they overwrite and delete exactly
// as the same Commit would: the store reads the same afterwards
// (TestIngestMatchesCommit).
//
// What it costs: a table file and an ingestion per call, and a memtable
// that overlaps the table is flushed (or queued for flushing) first. So it
// pays only for large batches; small ones should Commit.
func (b *Batch) CommitIngest() error {
	// A record's value and 2–4 index entries, its entity, the progress.
	t := b.newTableEntries()
	slot := b.s.ingest.take()
	path := b.s.ingest.path(slot)
	return b.finish(func() kvWriter { return t },
		func() error { return b.s.ingest.write(path, t, b.s.db.TableFormat()) },
		func() error { return b.s.db.Ingest(context.Background(), []string{path}) },
		func() { b.s.ingest.done(slot) })
}

// tableEntries collects a batch's entries to be written in key order (to
// a table, or to a Pebble batch). It keeps the slices it is given: a
// batch's keys and values are built for it, or are journal values nobody
// changes, so copying them again would be waste.
type tableEntries struct {
	e []tableEntry
	// refs and order are sorted's room, kept with e when t is reused
	// (recycle).
	refs  []entryRef
	order []*tableEntry
}

// newTableEntries has room for the batch's entries: a record's value and
// 2–4 index entries, its entity, the progress.
func (b *Batch) newTableEntries() *tableEntries {
	return &tableEntries{e: make([]tableEntry, 0, 5*len(b.records)+len(b.entities)+len(b.progress))}
}

// sorted is t's entries in key order.
//
// The entries are sorted by reference, not by value (swapping an entry's
// 56 bytes made the sort ~40 % dearer), in two steps: by their key's first
// byte, which is the key's kind (record, status, key, prune entry, entity,
// …), with a counting pass; then each kind on its own, by an integer
// abbreviation of the 8 key bytes that follow the prefix all keys of the
// kind share (such as "f/<time>/" or "s/in_progress/"), and by the whole
// keys only where abbreviations tie. Most comparisons are one integer
// compare instead of a bytes.Compare through two pointers that first
// walks the shared prefix.
func (t *tableEntries) sorted() ([]*tableEntry, error) {
	var counts [257]int
	for i := range t.e {
		counts[firstByte(t.e[i].key)+1]++
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	refs := slices.Grow(t.refs[:0], len(t.e))[:len(t.e)]
	t.refs = refs
	next := counts
	for i := range t.e {
		c := firstByte(t.e[i].key)
		refs[next[c]].e = &t.e[i]
		next[c]++
	}
	for c := range 256 {
		kind := refs[counts[c]:counts[c+1]]
		if len(kind) < 2 {
			continue
		}
		shared := kind[0].e.key
		for _, r := range kind[1:] {
			shared = shared[:commonPrefix(shared, r.e.key)]
		}
		for i := range kind {
			kind[i].abbr = abbrev(kind[i].e.key, len(shared))
		}
		slices.SortFunc(kind, func(a, b entryRef) int {
			if a.abbr != b.abbr {
				if a.abbr < b.abbr {
					return -1
				}
				return 1
			}
			return bytes.Compare(a.e.key, b.e.key)
		})
	}
	sorted := slices.Grow(t.order[:0], len(refs))[:len(refs)]
	t.order = sorted
	for i := range refs {
		sorted[i] = refs[i].e
		if i > 0 && bytes.Equal(sorted[i-1].key, sorted[i].key) {
			// Every entry of a batch has its own key (each names its
			// record's scope, entity or partition); a second one would be
			// a bug, and a table cannot hold it (in a Pebble batch, their
			// order would depend on the sort).
			return nil, fmt.Errorf("dedupe: key %q written twice in one batch", sorted[i].key)
		}
	}
	return sorted, nil
}

// entryRef is a table entry to sort: itself and its key's abbreviation.
type entryRef struct {
	abbr uint64
	e    *tableEntry
}

// firstByte is key's first byte, 0 for the empty key: it sorts first
// among the keys that begin with 0, as its abbreviation (0) and then the
// comparison of whole keys put it.
func firstByte(key []byte) int {
	if len(key) == 0 {
		return 0
	}
	return int(key[0])
}

// commonPrefix is the length of the prefix a and b share.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// abbrev is the 8 bytes of key from offset from as a big-endian integer,
// zero-padded: among keys that share their first from bytes, those that
// differ in the next 8 order the same way by it; equal abbreviations fall
// back to comparing the keys (a key and its zero-padded extension
// abbreviate alike).
func abbrev(key []byte, from int) uint64 {
	var b [8]byte
	copy(b[:], key[from:])
	return binary.BigEndian.Uint64(b[:])
}

type tableEntry struct {
	key, value []byte
	del        bool
}

func (t *tableEntries) Set(key, value []byte, _ *pebble.WriteOptions) error {
	t.e = append(t.e, tableEntry{key: key, value: value})
	return nil
}

func (t *tableEntries) Delete(key []byte, _ *pebble.WriteOptions) error {
	t.e = append(t.e, tableEntry{key: key, del: true})
	return nil
}

// ingestFiles names and writes the tables of CommitIngest in the store's
// directory, on its file system (Pebble links them in; they must be on
// the same one). Names come from a small set reused as ingestions end, so
// a crash between writing a table and ingesting it leaves at most one
// file per concurrent ingestion, overwritten by the next.
type ingestFiles struct {
	fs   vfs.FS // set by open, then read only
	dir  string // set by open, then read only
	once sync.Once
	opts sstable.WriterOptions // written once (once), then read only
	mu   sync.Mutex            // guards busy: partitions restore concurrently
	busy []bool
}

// write sorts t's entries and writes them to path as a synced table of the
// given format, with the filters and compression of the store's own tables.
func (f *ingestFiles) write(path string, t *tableEntries, format sstable.TableFormat) error {
	sorted, err := t.sorted()
	if err != nil {
		return fmt.Errorf("dedupe: ingest: %w", err)
	}
	file, err := f.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("dedupe: ingest: create %s: %w", path, err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(file), f.writerOptions(format))
	for _, e := range sorted {
		if e.del {
			err = w.Delete(e.key)
		} else {
			err = w.Set(e.key, e.value)
		}
		if err != nil {
			break
		}
	}
	// Close finishes the table and syncs it (Ingest requires it synced).
	if err = errors.Join(err, w.Close()); err != nil {
		return fmt.Errorf("dedupe: ingest: write %s: %w", path, err)
	}
	return nil
}

// writerOptions are Pebble's defaults for a level-0 table with the store's
// filter and compression (as open sets them for every level), in the
// table format the store writes.
func (f *ingestFiles) writerOptions(format sstable.TableFormat) sstable.WriterOptions {
	f.once.Do(func() {
		o := &pebble.Options{Comparer: pebble.DefaultComparer}
		o.EnsureDefaults()
		for i := range o.Levels {
			o.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
			o.Levels[i].Compression = tableCompression
		}
		f.opts = o.MakeWriterOptions(0, format)
	})
	opts := f.opts
	opts.TableFormat = format
	return opts
}

// take reserves a table name (path).
func (f *ingestFiles) take() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.busy, false)
	if i < 0 {
		i = len(f.busy)
		f.busy = append(f.busy, false)
	}
	f.busy[i] = true
	return i
}

func (f *ingestFiles) path(slot int) string {
	return f.fs.PathJoin(f.dir, "restore-ingest-"+strconv.Itoa(slot)+".sst")
}

// done removes the table of slot if Pebble has not taken it (a failed
// write or ingestion; Ingest removes what it ingested) and frees its name.
func (f *ingestFiles) done(slot int) {
	_ = f.fs.Remove(f.path(slot))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy[slot] = false
}
