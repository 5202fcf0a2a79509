package dedupe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable/blob"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/onceflight/onceflight/schemas"
)

// recordValueBytes sums the lengths of the stored records' values.
func recordValueBytes(t *testing.T, s *Store) uint64 {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: recordSpan.start, UpperBound: recordSpan.end})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var n uint64
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			t.Fatal(err)
		}
		n += uint64(len(v))
	}
	return n
}

func putMany(t *testing.T, s *Store, from, to int) {
	t.Helper()
	for i := from; i < to; i += 500 {
		b := s.NewBatch()
		for j := i; j < min(i+500, to); j++ {
			b.PutRecord(rec(fmt.Sprint("k", j), fmt.Sprint("e", j%50), schemas.StatusSucceeded, int32(j%3)))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func checkMany(t *testing.T, s *Store, n int) {
	t.Helper()
	for j := range n {
		r, ok, err := s.Lookup(fmt.Sprint("e", j%50), fmt.Sprint("k", j))
		if err != nil || !ok || r.IdempotencyKey != fmt.Sprint("k", j) {
			t.Fatalf("k%d: %+v %v %v", j, r, ok, err)
		}
	}
}

// TestRecordsSeparated: the records' values, and only they, are in blob
// files: the blob files' value bytes are exactly the records' (not the
// entity states, Progress, index entries or m/ keys).
func TestRecordsSeparated(t *testing.T) {
	s := openTest(t, t.TempDir())
	putMany(t, s, 0, 2000)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	m := s.db.Metrics()
	want := recordValueBytes(t, s)
	if m.BlobFiles.ValueSize != want {
		t.Fatalf("blob files hold %d value bytes, the records are %d", m.BlobFiles.ValueSize, want)
	}
	checkMany(t, s, 2000)
}

// TestOpensStoreWithoutValueSeparation: a store written by a build before
// value separation (records in its tables) opens, reads, takes new records,
// and its old records move to blob files when compacted.
func TestOpensStoreWithoutValueSeparation(t *testing.T) {
	dir := t.TempDir()
	old, err := Open(dir, func(c *Settings) { c.noValueSep = true })
	if err != nil {
		t.Fatal(err)
	}
	putMany(t, old, 0, 2000)
	if err := old.db.Flush(); err != nil {
		t.Fatal(err)
	}
	oldBytes := recordValueBytes(t, old)
	if n := old.db.Metrics().BlobFiles.LiveCount; n != 0 {
		t.Fatalf("the old layout wrote %d blob files", n)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, dir)
	checkMany(t, s, 2000)
	putMany(t, s, 2000, 4000)
	checkMany(t, s, 4000)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	// The new records are separated; the old ones stay in their tables
	// until a compaction writes new blob files (Pebble decides when).
	newBytes := recordValueBytes(t, s) - oldBytes
	if got := s.db.Metrics().BlobFiles.ValueSize; got != newBytes {
		t.Fatalf("blob files hold %d value bytes, the new records are %d", got, newBytes)
	}
	if err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkMany(t, s, 4000)
	if got := s.db.Metrics().BlobFiles.ValueSize; got < newBytes {
		t.Fatalf("after compaction blob files hold %d value bytes, the new records alone are %d", got, newBytes)
	}
}

// overwrite returns a damage that zeroes n bytes of a file at off(size).
func overwrite(n int, off func(size int64) int64) func(string) error {
	return func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteAt(make([]byte, n), off(fi.Size()))
		return errors.Join(err, f.Close())
	}
}

// TestBlobDamageFailsStore: a blob file (where records are now) with a
// damaged value block or footer, cut short or missing fails the store like
// a damaged table found while running — no panic, nothing more answered —
// and the next start rebuilds. Pebble does not open blob files at Open, so
// the damage is found by the first read of one of its records.
func TestBlobDamageFailsStore(t *testing.T) {
	for name, damage := range map[string]func(string) error{
		"value block": overwrite(20, func(size int64) int64 { return size / 3 }),
		"footer":      overwrite(20, func(size int64) int64 { return size - 30 }),
		"cut":         func(p string) error { return os.Truncate(p, 100) },
		"missing":     os.Remove,
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			tabledIndex(t, dir)
			blobs, _ := filepath.Glob(filepath.Join(dir, "*.blob"))
			if len(blobs) == 0 {
				t.Fatal("no blob file to damage")
			}
			for _, p := range blobs {
				if err := damage(p); err != nil {
					t.Fatal(err)
				}
			}
			damageFoundWhileRunning(t, dir)
		})
	}
}

// damageFoundWhileRunning checks a store in dir whose damage Open does not
// see: record lookups meet it and fail the store (nothing more answered),
// the next Open refuses the directory (the marker) and one with
// WithRebuildOnCorruption starts empty.
func damageFoundWhileRunning(t *testing.T, dir string) {
	t.Helper()
	s, err := Open(dir, WithRebuildOnCorruption())
	if err != nil {
		t.Fatalf("the damage was found at open (%v): this test needs damage found later", err)
	}
	var readErr error
	for i := range 2000 {
		if _, _, readErr = s.Lookup("e", fmt.Sprint("k", i)); readErr != nil {
			break
		}
	}
	if readErr == nil {
		t.Fatal("every record read back over the damage")
	}
	if !errors.Is(s.Failed(), ErrFailed) {
		t.Fatalf("reads over the damage left the store usable (read: %v)", readErr)
	}
	t.Logf("failed: %v", s.Failed())
	if _, _, err := s.Lookup("e", "k1"); !errors.Is(err, ErrFailed) {
		t.Errorf("after the damage: %v, want ErrFailed", err)
	}
	s.Close()
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("next Open: %v, want ErrCorrupt from the marker", err)
	}
	s, err = Open(dir, WithRebuildOnCorruption())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, err := s.Lookup("e", "k5"); ok || err != nil {
		t.Errorf("the damaged index was reused: %v %v", ok, err)
	}
}

// TestPruneReclaimsBlobFiles: values of records Prune stubbed or forgot
// leave the blob files once compacted (blob files with no value still
// referenced are deleted), so pruning bounds the blob files too.
func TestPruneReclaimsBlobFiles(t *testing.T) {
	s := openTest(t, t.TempDir())
	for i := 0; i < 3000; i += 1000 {
		b := s.NewBatch()
		for j := i; j < i+1000; j++ {
			b.PutRecord(fullRec(fmt.Sprintf("k%06d", j), "e", schemas.StatusSucceeded, t0))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	garbage := func() (live, garbage uint64) {
		tableBytes(t, s)
		m := s.db.Metrics().BlobFiles
		return m.LiveSize, m.ValueSize - m.ReferencedValueSize
	}
	full, g := garbage()
	if full == 0 || g != 0 {
		t.Fatalf("full records: %d blob bytes, %d garbage", full, g)
	}
	pruneAll(t, s, t0.Add(keep+day))
	stubs, g := garbage()
	t.Logf("blob files: full %d B, stubs %d B (garbage %d B)", full, stubs, g)
	if g != 0 || stubs >= full {
		t.Errorf("after stubbing and compacting: %d blob bytes (full: %d), %d garbage", stubs, full, g)
	}
	pruneAll(t, s, t0.Add(memory+day))
	if after, g := garbage(); after != 0 || g != 0 {
		t.Errorf("after forgetting and compacting: %d blob bytes, %d garbage", after, g)
	}
}

// recordTables returns the paths of the tables of the store in dir that
// hold records (keys "r/..."). The store's tables are split at the record
// span (recordSpanPolicy), so damage to these is met by a record lookup,
// not by Open's own reads (m/format, m/prune).
func recordTables(t *testing.T, dir string) []string {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	levels, err := s.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, level := range levels {
		for _, tb := range level {
			if bytes.HasPrefix(tb.Smallest.UserKey, recordSpan.start) {
				out = append(out, filepath.Join(dir, fmt.Sprintf("%06d.sst", tb.FileNum)))
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no table of records")
	}
	return out
}

// TestPruneIndexTablesApart: a flush writes the prune index (f/) into
// tables of its own, apart from the entity and progress entries around it
// in key order, so that a flush's prune table (newer finish times than any
// stored) does not overlap the stored prune index and L0 → Lbase
// compactions need not rewrite it (recordSpanPolicy).
func TestPruneIndexTablesApart(t *testing.T) {
	s := openTest(t, t.TempDir())
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	for i := range 20 {
		var recs []schemas.Record
		for j := range 50 {
			r := rec(fmt.Sprintf("k-%d-%d", i, j), fmt.Sprintf("e-%d", j), schemas.StatusSucceeded, 0)
			at := t0.Add(time.Duration(i*50+j) * time.Millisecond)
			r.StartedAt, r.FinishedAt = &at, &at
			recs = append(recs, r)
		}
		b := s.NewBatch()
		for _, r := range recs {
			b.PutRecord(r)
		}
		b.SetProgress(0, Progress{JournalOffset: int64(i)})
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := s.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var prune int
	for _, level := range levels {
		for _, tb := range level {
			lo, hi := bytes.HasPrefix(tb.Smallest.UserKey, pruneSpan.start), bytes.HasPrefix(tb.Largest.UserKey, pruneSpan.start)
			if lo != hi {
				t.Errorf("table %s spans %q .. %q: prune entries share it", tb.FileNum, tb.Smallest.UserKey, tb.Largest.UserKey)
			}
			if lo {
				prune++
			}
		}
	}
	if prune == 0 {
		t.Error("no table of prune entries")
	}
}

// TestFlushBlobBlocks: a flush writes its records' values in blocks of
// flushBlockSize (16 KiB), not Pebble's 4 KiB, so one block read
// answers the lookups of a stretch of records written together. The
// records here are ~330 bytes: a 4 KiB block holds 11 or 12, a 16 KiB
// one about 48.
func TestFlushBlobBlocks(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	putMany(t, s, 0, 2000)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	blobs, err := filepath.Glob(filepath.Join(dir, "*.blob"))
	if err != nil || len(blobs) == 0 {
		t.Fatalf("no blob file after the flush: %v", err)
	}
	var values, blocks int
	for _, name := range blobs {
		layout := blobLayout(t, name)
		for line := range strings.Lines(layout) {
			if n, ok := strings.CutPrefix(line, "values: "); ok {
				v, err := strconv.Atoi(strings.TrimSpace(n))
				if err != nil {
					t.Fatal(err)
				}
				values += v
				blocks++
			}
		}
	}
	if values != 2000 {
		t.Fatalf("%d values in the blob files, want 2000", values)
	}
	if per := values / blocks; per < 36 {
		t.Errorf("%d values in %d blocks (%d a block): blocks of Pebble's 4 KiB, not flushBlockSize", values, blocks, per)
	}
}

// blobLayout is the layout of blob file name (blob.FileReader.Layout):
// a "values: N" line for each value block.
func blobLayout(t *testing.T, name string) string {
	t.Helper()
	f, err := vfs.Default.Open(name, vfs.RandomReadsOption)
	if err != nil {
		t.Fatal(err)
	}
	r, err := objstorageprovider.NewFileReadable(f, vfs.Default, objstorageprovider.NewReadaheadConfig(), name)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := blob.NewFileReader(context.Background(), r, blob.FileReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	layout, err := fr.Layout()
	if err != nil {
		t.Fatal(err)
	}
	return layout
}
