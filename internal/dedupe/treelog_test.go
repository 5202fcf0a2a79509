package dedupe

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// TestTreeLoggedAtDebug: with Debug on, Open and Close log Pebble's figures
// (what a flush wrote since Open, what the next start inherits); at Info
// nothing.
func TestTreeLoggedAtDebug(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	s, err := Open(dir, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `msg="dedupe: opened" wal_bytes_in=`) {
		t.Fatalf("no tree at open in %q", logs.String())
	}
	for i := range 50 {
		put(t, s, rec(fmt.Sprintf("k-%d", i), "e-1", schemas.StatusSucceeded, 0))
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closing := logs.String()[strings.Index(logs.String(), `msg="dedupe: closing"`):]
	for _, want := range []string{" flushes=1 ", " compactions=0 ", " compacted_blob_bytes=0 ", " levels=L0:"} {
		if !strings.Contains(closing, want) {
			t.Errorf("closing line lacks %q: %q", want, closing)
		}
	}
	if strings.Contains(closing, " flushed_table_bytes=0 ") || strings.Contains(closing, " wal_bytes_in=0 ") {
		t.Errorf("closing line counts no write: %q", closing)
	}

	logs.Reset()
	s, err = Open(dir, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "dedupe: opened") || strings.Contains(logs.String(), "dedupe: closing") {
		t.Errorf("tree logged at Info: %q", logs.String())
	}
}

// TestTreeAttrsCountCacheReads: the tree log carries the block cache's
// hits and misses, so that a drain's log tells its block reads per key.
func TestTreeAttrsCountCacheReads(t *testing.T) {
	s := openTest(t, t.TempDir())
	putMany(t, s, 0, 100)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	checkMany(t, s, 100) // reads the flushed table's and blob file's blocks
	attrs := treeAttrs(s.db.Metrics())
	got := map[string]string{}
	for i := 0; i+1 < len(attrs); i += 2 {
		got[fmt.Sprint(attrs[i])] = fmt.Sprint(attrs[i+1])
	}
	for _, k := range []string{"cache_hits", "cache_misses"} {
		if v, ok := got[k]; !ok || v == "0" {
			t.Errorf("%s = %q (present %v), want a count above 0: %v", k, v, ok, attrs)
		}
	}
}

// TestCMemoryCountsMemtablesAndCache: what the trimmer compares glibc's
// arenas with is at least the memtable a write allocated, and nothing
// once the store is closed.
func TestCMemoryCountsMemtablesAndCache(t *testing.T) {
	s := openTest(t, t.TempDir())
	put(t, s, rec("a", "e", schemas.StatusSucceeded, 0))
	if got := s.CMemory(); got <= 0 {
		t.Fatalf("CMemory %d with a memtable in use", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.CMemory(); got != 0 {
		t.Fatalf("CMemory %d after Close", got)
	}
}
