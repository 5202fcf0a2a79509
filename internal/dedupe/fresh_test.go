package dedupe

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// TestFreshMatchesLookups: the same catch-up — a key journaled in_progress,
// thousands of other keys (enough to evict it from the entry caches), then
// the key again as succeeded, and an entity touched again after eviction —
// written with and without a Fresh leaves the same index, entity states and
// records. Without the Fresh seeing every key it wrote (cache hit or not),
// the second write of "k-first" would pass for new and leave its
// in_progress index entry behind.
func TestFreshMatchesLookups(t *testing.T) {
	const others = 5000
	run := func(fresh *Fresh) *Store {
		s, err := Open(t.TempDir(), WithEntryCache(1024))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		write := func(recs ...schemas.Record) {
			b := s.NewBatch()
			defer b.Close()
			if fresh != nil {
				b.UseFresh(fresh)
			}
			for _, r := range recs {
				b.PutRecord(r)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		first := rec("k-first", "e-hot", schemas.StatusInProgress, 3)
		write(first)
		for i := 0; i < others; i += 500 {
			var recs []schemas.Record
			for j := i; j < i+500; j++ {
				r := rec(fmt.Sprintf("k-%d", j), fmt.Sprintf("e-%d", j), schemas.StatusSucceeded, 3)
				r.EntityVersion = int64(j + 1) // lost if e-7's state were taken as new
				recs = append(recs, r)
			}
			write(recs...)
		}
		done := first
		done.Status = schemas.StatusSucceeded
		done.EntityVersion = 4
		again := rec("k-again", "e-7", schemas.StatusUnresolved, 3)
		write(done, again)
		return s
	}
	plain, fast := run(nil), run(NewFresh(others+3))

	// Every key and value, index entries included: a stale index entry
	// is invisible to the readers (they check the record) but not here.
	if a, b := dump(t, plain), dump(t, fast); !reflect.DeepEqual(a, b) {
		t.Errorf("stores differ: %d entries without Fresh, %d with; differing keys: %v", len(a), len(b), diff(mapKeys(a), mapKeys(b)))
	}

	for _, st := range []schemas.Status{schemas.StatusInProgress, schemas.StatusSucceeded, schemas.StatusUnresolved} {
		a, err := plain.ByStatus(st, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := fast.ByStatus(st, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(keys(a), keys(b)) {
			t.Errorf("status %s: without Fresh %d keys, with Fresh %d: %v", st, len(a), len(b), diff(keys(a), keys(b)))
		}
	}
	if got, err := fast.ByStatus(schemas.StatusInProgress, 0); err != nil || len(got) != 0 {
		t.Errorf("in_progress index with Fresh: %v (err %v), want none: k-first moved to succeeded", keys(got), err)
	}
	for _, entity := range []string{"e-hot", "e-7", "e-4999"} {
		a, okA, errA := plain.Entity(entity)
		b, okB, errB := fast.Entity(entity)
		if errA != nil || errB != nil || okA != okB || a != b {
			t.Errorf("entity %s: without Fresh %+v %v %v, with Fresh %+v %v %v", entity, a, okA, errA, b, okB, errB)
		}
	}
	a, _, _ := plain.Lookup("e-hot", "k-first")
	b, _, _ := fast.Lookup("e-hot", "k-first")
	if !reflect.DeepEqual(a, b) || b.Status != schemas.StatusSucceeded {
		t.Errorf("k-first: without Fresh %+v, with Fresh %+v", a, b)
	}
}

func dump(t *testing.T, s *Store) map[string]string {
	t.Helper()
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

func mapKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func diff(a, b []string) []string {
	in := map[string]int{}
	for _, k := range a {
		in[k]++
	}
	for _, k := range b {
		in[k]--
	}
	var out []string
	for k, n := range in {
		if n != 0 {
			out = append(out, fmt.Sprintf("%s:%+d", k, n))
		}
	}
	return out
}

// TestPutNewRecordBytes: for keys that are absent, PutNewRecordBytes leaves
// the same index, records and entity states as PutRecordBytes (a key new
// twice in one batch, a key overwritten in a later batch through the
// ordinary call, an entity written before). And it really does not read the
// stored record: told "absent" for a key that is stored, it leaves the old
// record's index entry behind, which PutRecordBytes removes — the contract
// the executor keeps (only keys its worker read as absent).
func TestPutNewRecordBytes(t *testing.T) {
	run := func(absent bool) *Store {
		s, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		write := func(fresh bool, recs ...schemas.Record) {
			b := s.NewBatch()
			defer b.Close()
			for _, r := range recs {
				if fresh && absent {
					b.PutNewRecordBytes(r, nil)
				} else {
					b.PutRecordBytes(r, nil)
				}
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		write(false, rec("k-old", "e-1", schemas.StatusSucceeded, 2))
		inFlight := rec("k-a", "e-1", schemas.StatusInProgress, 2)
		done := inFlight
		done.Status = schemas.StatusUnresolved
		write(true, inFlight, rec("k-b", "e-2", schemas.StatusSucceeded, 2))
		// k-a again, in a later batch: not new any more.
		write(false, done, rec("k-c", "e-2", schemas.StatusRejected, 2))
		return s
	}
	plain, fast := run(false), run(true)
	if a, b := dump(t, plain), dump(t, fast); !reflect.DeepEqual(a, b) {
		t.Errorf("stores differ: %d entries with PutRecordBytes, %d with PutNewRecordBytes; differing keys: %v", len(a), len(b), diff(mapKeys(a), mapKeys(b)))
	}

	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put(t, s, rec("k-1", "e-1", schemas.StatusInProgress, 2))
	s.metas.del(scope("e-1", "k-1")) // as if evicted: only a read would find it
	b := s.NewBatch()
	b.PutNewRecordBytes(rec("k-1", "e-1", schemas.StatusSucceeded, 2), nil)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	stale := statusPrefix(schemas.StatusInProgress) + scope("e-1", "k-1")
	if _, ok := dump(t, s)[stale]; !ok {
		t.Errorf("index entry %q gone after PutNewRecordBytes over a stored record: the stored record was read", stale)
	}
}

// TestCheckAbsentRefusesAStoredKey: with CheckAbsent (the executor's
// tests), PutNewRecordBytes of a key that has a stored record fails its
// batch instead of leaving the stored record's index entries behind.
func TestCheckAbsentRefusesAStoredKey(t *testing.T) {
	CheckAbsent = true
	t.Cleanup(func() { CheckAbsent = false })
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put(t, s, rec("k-1", "e-1", schemas.StatusInProgress, 2))
	b := s.NewBatch()
	b.PutNewRecordBytes(rec("k-1", "e-1", schemas.StatusSucceeded, 2), nil)
	if err := b.Commit(); err == nil || !strings.Contains(err.Error(), "is stored") {
		t.Fatalf("Commit = %v, want the stored key refused", err)
	}
	b = s.NewBatch()
	b.PutNewRecordBytes(rec("k-2", "e-1", schemas.StatusSucceeded, 2), nil)
	if err := b.Commit(); err != nil {
		t.Fatalf("a key never stored: %v", err)
	}
}
