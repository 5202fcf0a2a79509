package dedupe

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/internal/testlog"
	"github.com/onceflight/onceflight/schemas"
)

// tabledIndex writes an index in dir whose records k0..k1999 are in
// tables (flushed), then walOnly, left in the WAL, and closes it.
func tabledIndex(t *testing.T, dir string, walOnly ...schemas.Record) {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		put(t, s, rec(fmt.Sprint("k", i), "e", schemas.StatusSucceeded, 0))
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(walOnly) > 0 {
		put(t, s, walOnly...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// damagedIndex writes a tabledIndex and damages its files as mode says.
func damagedIndex(t *testing.T, mode string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	tabledIndex(t, dir, rec("k-wal", "e", schemas.StatusSucceeded, 0))
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	damaged := 0
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sst, manifest := filepath.Ext(p) == ".sst", strings.HasPrefix(e.Name(), "MANIFEST-")
		switch {
		case mode == "truncated table" && sst:
			err = os.Truncate(p, fi.Size()/2)
		case mode == "missing table" && sst:
			err = os.Remove(p)
		case mode == "empty MANIFEST" && manifest:
			err = os.Truncate(p, 0)
		case mode == "missing MANIFEST" && manifest:
			err = os.Remove(p)
		default:
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		damaged++
	}
	if damaged == 0 {
		t.Fatalf("%s: nothing to damage in %v", mode, ents)
	}
	return dir
}

// TestCorruptedIndexMovedAside: an index whose files are damaged is
// refused with ErrCorrupt by default, and with WithRebuildOnCorruption
// moved aside (WARN naming the damage) and replaced by an empty one, which
// restore fills from the journal.
func TestCorruptedIndexMovedAside(t *testing.T) {
	for _, mode := range []string{"truncated table", "missing table", "empty MANIFEST", "missing MANIFEST"} {
		t.Run(mode, func(t *testing.T) {
			dir := damagedIndex(t, mode)
			if s, err := Open(dir); !errors.Is(err, ErrCorrupt) {
				if err == nil {
					s.Close()
				}
				t.Fatalf("Open of a damaged index: %v, want ErrCorrupt", err)
			} else {
				t.Logf("refused: %v", err)
			}
			var logs testlog.Buffer // the presence scan logs on a goroutine of its own
			s, err := Open(dir, WithRebuildOnCorruption(), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatalf("Open with rebuild: %v", err)
			}
			defer s.Close()
			if _, ok, err := s.Lookup("e", "k5"); ok || err != nil {
				t.Errorf("the rebuilt index is not empty: ok=%v err=%v", ok, err)
			}
			if p, err := s.Progress(0); err != nil || p.JournalOffset != 0 {
				t.Errorf("progress %+v, %v: restore must replay from the start", p, err)
			}
			asides, _ := filepath.Glob(dir + ".corrupt-*")
			if len(asides) != 1 {
				t.Errorf("moved aside: %v, want one directory", asides)
			}
			if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "moved_to="+asides[0]) {
				t.Errorf("no WARN naming the move:\n%s", l)
			}
		})
	}
}

// TestHealthyIndexNotMovedAside: a lock held by another process, or an
// index that is merely old, is not corruption.
func TestHealthyIndexNotMovedAside(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := openTest(t, dir)
	put(t, s, rec("k1", "e", schemas.StatusSucceeded, 0))
	if s2, err := Open(dir, WithRebuildOnCorruption()); err == nil {
		s2.Close()
		t.Fatal("a second Open of a locked index succeeded")
	} else if errors.Is(err, ErrCorrupt) {
		t.Fatalf("a held lock taken for corruption: %v", err)
	}
	if asides, _ := filepath.Glob(dir + ".corrupt-*"); len(asides) != 0 {
		t.Fatalf("a locked index was moved aside: %v", asides)
	}
}

// TestDamageFoundWhileRunningRebuildsAtNextStart: a checksum failure found
// on a read (a lookup, or the presence filter's scan of the record keys
// after Open) fails the store (nothing more answered from it) and marks the
// directory, so the next start rebuilds it even though Pebble alone would
// open it again.
func TestDamageFoundWhileRunningRebuildsAtNextStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	tabledIndex(t, dir)
	for _, p := range recordTables(t, dir) {
		if err := overwrite(512, func(size int64) int64 { return size / 3 })(p); err != nil {
			t.Fatal(err)
		}
	}
	damageFoundWhileRunning(t, dir)
}
