package dedupe

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// journalFixture is a journal's record values as a restore meets them:
// intents followed, batches later, by their final records (one released,
// some holding a unique_by tuple, some unresolved), entities touched many
// times, and keys evicted from the entry caches between their versions.
func journalFixture(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	add := func(r schemas.Record) {
		b, err := wire.SealRecord(&r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	for i := range 6000 {
		r := rec(fmt.Sprintf("k-%d", i), fmt.Sprintf("e-%d", i%450), schemas.StatusInProgress, int32(i%3))
		if i%5 == 0 {
			r.UniqueKey = fmt.Sprintf("u-%d", i%40)
		}
		add(r)
		if i >= 2500 { // the final record of a key journaled 2 500 records before
			j := i - 2500
			f := rec(fmt.Sprintf("k-%d", j), fmt.Sprintf("e-%d", j%450), schemas.StatusSucceeded, int32(j%3))
			f.EntityVersion = int64(j + 1)
			fin := at.Add(time.Duration(j) * time.Millisecond)
			f.FinishedAt = &fin
			switch {
			case j%7 == 0:
				f.Status = schemas.StatusUnresolved
				f.FinishedAt = nil
			case j%11 == 0:
				f.Status = schemas.StatusFailed
			case j%13 == 0:
				f.Release = &schemas.Resolution{By: "ops", At: fin, Reason: "again", As: schemas.StatusSucceeded}
			}
			if j%5 == 0 {
				f.UniqueKey = fmt.Sprintf("u-%d", j%40)
			}
			add(f)
		}
	}
	return out
}

// TestIngestMatchesCommit: the same journal restored the old way (every
// record decoded whole, batches committed through the memtable, no Fresh)
// and the restore's way (schemas.UnmarshalRecordIndex, a Fresh, batches
// ingested as tables, the last one committed) leaves the same keys and
// values, index entries and entity states included. An ingested table
// that skipped the deletion of an intent's index entries, a decode that
// dropped a field the index reads, or an entity state folded from a
// partial record would all show here.
func TestIngestMatchesCommit(t *testing.T) {
	journal := journalFixture(t)
	const perBatch = 700
	restore := func(newWay bool) *Store {
		s, err := Open(t.TempDir(), WithEntryCache(1024))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		var fresh *Fresh
		if newWay {
			fresh = NewFresh(int64(len(journal)))
		}
		for start := 0; start < len(journal); start += perBatch {
			b := s.NewBatch()
			if fresh != nil {
				b.UseFresh(fresh)
			}
			end := min(start+perBatch, len(journal))
			for _, raw := range journal[start:end] {
				decode := schemas.UnmarshalRecord
				if newWay {
					decode = schemas.UnmarshalRecordIndex
				}
				r, err := decode(raw)
				if err != nil {
					t.Fatal(err)
				}
				b.PutRecordBytes(r, raw)
			}
			b.SetProgress(0, Progress{JournalOffset: int64(end), Epoch: 1})
			commit := b.Commit
			if newWay && end < len(journal) {
				commit = b.CommitIngest
			}
			if err := commit(); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	old, ingested := restore(false), restore(true)
	a, b := dump(t, old), dump(t, ingested)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("stores differ: %d entries the old way, %d ingested; differing keys: %v", len(a), len(b), diff(mapKeys(a), mapKeys(b)))
	}
	// The fixture reached what it is for: intents moved, tuples held.
	inProgress, err := ingested.ByStatus(schemas.StatusInProgress, 0)
	if err != nil || len(inProgress) != 2500 {
		t.Errorf("in_progress index after restore: %d keys (err %v), want the 2 500 without a final record", len(inProgress), err)
	}
	if r, ok, err := ingested.Lookup("e-13", "k-13"); err != nil || !ok || r.Release == nil || r.Fingerprint != "sha256:k-13" {
		t.Errorf("k-13 after an ingested restore: %+v %v %v, want the whole released record", r, ok, err)
	}
	if es, ok, err := ingested.Entity("e-7"); err != nil || !ok || es.Version == 0 {
		t.Errorf("entity e-7 after an ingested restore: %+v %v %v", es, ok, err)
	}
}

// TestLeftIngestTable: a crash between writing an ingestion's table and
// ingesting it leaves the file behind. The store still opens, and the next
// ingestion overwrites it (the same name is taken again).
func TestLeftIngestTable(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, "restore-ingest-0.sst")
	if err := os.WriteFile(left, []byte("half a table"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir); err != nil {
		t.Fatalf("open with a table left by a crash: %v", err)
	}
	defer s.Close()
	b := s.NewBatch()
	b.PutRecord(rec("k-1", "e-1", schemas.StatusSucceeded, 0))
	b.SetProgress(0, Progress{JournalOffset: 1})
	if err := b.CommitIngest(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Lookup("e-1", "k-1"); err != nil || !ok {
		t.Fatalf("k-1 after ingesting over the left table: found %v, err %v", ok, err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("%s still there after the ingestion (err %v)", left, err)
	}
}
