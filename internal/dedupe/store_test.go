package dedupe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

func openTest(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func rec(key, entity string, status schemas.Status, partition int32) schemas.Record {
	return schemas.Record{
		IdempotencyKey: key,
		Entity:         entity,
		Action:         "payments.refund",
		Status:         status,
		Fingerprint:    "sha256:" + key,
		Attempts:       1,
		Result:         json.RawMessage(`{"http_status":201}`),
		Command:        schemas.CommandRef{ID: "cmd-" + key, Source: "test", Partition: partition, Offset: 7},
		Executor:       "test",
		Epoch:          1,
		Hash:           "sha256:h-" + key,
	}
}

func put(t *testing.T, s *Store, recs ...schemas.Record) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	for _, r := range recs {
		b.PutRecord(r)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

func mustLookup(t *testing.T, s *Store, key string) (schemas.Record, bool) {
	t.Helper()
	return lookupAnyEntity(t, s, key)
}

// lookupAnyEntity is the record of key whatever its entity; the tests
// that use it give every key one entity.
func lookupAnyEntity(t testing.TB, s *Store, key string) (schemas.Record, bool) {
	t.Helper()
	recs, err := s.LookupKey(key)
	if err != nil {
		t.Fatal(err)
	}
	switch len(recs) {
	case 0:
		return schemas.Record{}, false
	case 1:
		return recs[0], true
	}
	t.Fatalf("key %q has %d records", key, len(recs))
	return schemas.Record{}, false
}

func keys(recs []schemas.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.IdempotencyKey
	}
	return out
}

func TestPutLookupMiss(t *testing.T) {
	s := openTest(t, t.TempDir())
	want := rec("k1", "order-1", schemas.StatusSucceeded, 2)
	put(t, s, want)

	got, ok := mustLookup(t, s, "k1")
	if !ok {
		t.Fatal("k1 not found")
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Misses, including keys that share a prefix with a stored key: the
	// prefix seek must be exact.
	for _, k := range []string{"k", "k1x", "k2", ""} {
		if _, ok := mustLookup(t, s, k); ok {
			t.Errorf("Lookup(%q) found a record", k)
		}
	}
}

func TestBatchAtomicity(t *testing.T) {
	s := openTest(t, t.TempDir())

	b := s.NewBatch()
	b.PutRecord(rec("a", "e1", schemas.StatusSucceeded, 0))
	b.SetProgress(0, Progress{JournalOffset: 10, Epoch: 3, LastHash: "h", TokenSeq: 4})
	// Nothing is visible before Commit.
	if _, ok := mustLookup(t, s, "a"); ok {
		t.Fatal("record visible before commit")
	}
	// Close without Commit discards everything.
	b.Close()
	if _, ok := mustLookup(t, s, "a"); ok {
		t.Fatal("record visible after Close without Commit")
	}
	if p, err := s.Progress(0); err != nil || p != (Progress{}) {
		t.Fatalf("progress after discarded batch = %+v, %v", p, err)
	}
	if _, ok, _ := s.Entity("e1"); ok {
		t.Fatal("entity visible after discarded batch")
	}
	if err := b.Commit(); err == nil {
		t.Fatal("Commit after Close succeeded")
	}

	// Committed: records, entity and progress together.
	b = s.NewBatch()
	b.PutRecord(rec("a", "e1", schemas.StatusSucceeded, 0))
	b.PutRecord(rec("b", "e2", schemas.StatusFailed, 0))
	wantP := Progress{JournalOffset: 12, Epoch: 3, LastHash: "sha256:h-b", TokenSeq: 5}
	b.SetProgress(0, wantP)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	for _, k := range []string{"a", "b"} {
		if _, ok := mustLookup(t, s, k); !ok {
			t.Errorf("%s missing after commit", k)
		}
	}
	if p, err := s.Progress(0); err != nil || p != wantP {
		t.Fatalf("progress = %+v, %v; want %+v", p, err, wantP)
	}
	if p, err := s.Progress(1); err != nil || p != (Progress{}) {
		t.Fatalf("progress of untouched partition = %+v, %v", p, err)
	}
}

func TestBatchSeesItsOwnWrites(t *testing.T) {
	s := openTest(t, t.TempDir())
	b := s.NewBatch()
	defer b.Close()
	b.PutRecord(rec("k", "e", schemas.StatusInProgress, 0))
	got, ok, err := b.Lookup("e", "k")
	if err != nil || !ok || got.Status != schemas.StatusInProgress {
		t.Fatalf("batch Lookup = %+v, %v, %v", got, ok, err)
	}
	es, ok, err := b.Entity("e")
	if err != nil || !ok || es.InFlightKey != "k" {
		t.Fatalf("batch Entity = %+v, %v, %v", es, ok, err)
	}
	// The second put of the key in the same batch must know the first: the
	// in_progress index entry was never committed, and the final state wins.
	b.PutRecord(rec("k", "e", schemas.StatusSucceeded, 0))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	assertByStatus(t, s, schemas.StatusInProgress)
	assertByStatus(t, s, schemas.StatusSucceeded, "k")
	es, _, _ = s.Entity("e")
	if es.InFlightKey != "" {
		t.Fatalf("in-flight key not cleared: %+v", es)
	}
}

func TestReopenPersistence(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := rec("k", "e", schemas.StatusUnresolved, 3)
	b := s.NewBatch()
	b.PutRecord(want)
	b.SetProgress(3, Progress{JournalOffset: 99})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Lookup("e", "k"); err != ErrClosed {
		t.Fatalf("Lookup after Close: %v", err)
	}

	s = openTest(t, dir)
	got, ok := mustLookup(t, s, "k")
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen: %+v, %v", got, ok)
	}
	if p, _ := s.Progress(3); p.JournalOffset != 99 {
		t.Fatalf("progress after reopen = %+v", p)
	}
	u, err := s.Unresolved([]int32{3}, 0)
	if err != nil || len(u) != 1 {
		t.Fatalf("unresolved after reopen = %v, %v", keys(u), err)
	}
}

func assertByStatus(t *testing.T, s *Store, st schemas.Status, want ...string) {
	t.Helper()
	got, err := s.ByStatus(st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g := keys(got); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("ByStatus(%s) = %v, want %v", st, g, want)
	}
}

// TestSucceededNotIndexed: succeeded records get no s/ entry (most
// records are succeeded; the entry was one more for compactions to
// rewrite), and ByStatus(succeeded) finds them by scanning the records,
// in key order, stopping at limit; other statuses keep their entries.
func TestSucceededNotIndexed(t *testing.T) {
	s := openTest(t, t.TempDir())
	put(t, s,
		rec("a", "e1", schemas.StatusSucceeded, 0),
		rec("b", "e1", schemas.StatusFailed, 0),
		rec("c", "e2", schemas.StatusSucceeded, 0),
		rec("c", "e1", schemas.StatusHeld, 0),
		rec("d", "e3", schemas.StatusSucceeded, 0))
	if got := allKeys(t, s, statusPrefix(schemas.StatusSucceeded)); len(got) != 0 {
		t.Fatalf("s/succeeded/ entries written: %q", got)
	}
	for _, st := range []schemas.Status{schemas.StatusFailed, schemas.StatusHeld} {
		if got := allKeys(t, s, statusPrefix(st)); len(got) != 1 {
			t.Fatalf("%s entries %q, want one", st, got)
		}
	}
	assertByStatus(t, s, schemas.StatusSucceeded, "a", "c", "d")
	got, err := s.ByStatus(schemas.StatusSucceeded, 2)
	if err != nil || fmt.Sprint(keys(got)) != "[a c]" || got[1].Entity != "e2" || got[1].Hash != "sha256:h-c" {
		t.Fatalf("ByStatus(succeeded, 2) = %v, %v", keys(got), err)
	}
	// A record that leaves succeeded leaves the listing.
	put(t, s, rec("a", "e1", schemas.StatusUnresolved, 0))
	assertByStatus(t, s, schemas.StatusSucceeded, "c", "d")
	checkIndexes(t, s)
}

func TestStatusIndexMoves(t *testing.T) {
	s := openTest(t, t.TempDir())
	put(t, s,
		rec("k1", "e1", schemas.StatusInProgress, 0),
		rec("k2", "e2", schemas.StatusInProgress, 0),
		rec("k3", "e3", schemas.StatusSucceeded, 0))
	assertByStatus(t, s, schemas.StatusInProgress, "k1", "k2")
	assertByStatus(t, s, schemas.StatusSucceeded, "k3")

	put(t, s, rec("k1", "e1", schemas.StatusUnresolved, 0))
	assertByStatus(t, s, schemas.StatusInProgress, "k2")
	assertByStatus(t, s, schemas.StatusUnresolved, "k1")

	// An operator resolves it: it leaves both unresolved indexes.
	put(t, s, rec("k1", "e1", schemas.StatusSucceeded, 0))
	assertByStatus(t, s, schemas.StatusUnresolved)
	assertByStatus(t, s, schemas.StatusSucceeded, "k1", "k3")
	if u, err := s.Unresolved([]int32{0}, 0); err != nil || len(u) != 0 {
		t.Fatalf("Unresolved after resolve = %v, %v", keys(u), err)
	}

	// Rewriting the same status keeps one entry.
	put(t, s, rec("k3", "e3", schemas.StatusSucceeded, 0))
	assertByStatus(t, s, schemas.StatusSucceeded, "k1", "k3")

	if got, err := s.ByStatus(schemas.StatusSucceeded, 1); err != nil || len(got) != 1 {
		t.Fatalf("limit 1: %v, %v", keys(got), err)
	}
}

func TestEntityState(t *testing.T) {
	s := openTest(t, t.TempDir())
	if _, ok, err := s.Entity("order-1"); ok || err != nil {
		t.Fatalf("unknown entity: %v, %v", ok, err)
	}

	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	r1 := rec("k1", "order-1", schemas.StatusSucceeded, 4)
	r1.EntityVersion = 3
	put(t, s, r1)
	r2 := rec("k2", "order-1", schemas.StatusInProgress, 4)
	r2.Deadline = &deadline
	put(t, s, r2)

	es, ok, err := s.Entity("order-1")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	want := EntityState{Version: 3, Partition: 4, LastKey: "k2", InFlightKey: "k2"}
	if es != want {
		t.Fatalf("in flight: %+v, want %+v", es, want)
	}

	// A final record of another key does not clear the in-flight key.
	r3 := rec("k3", "order-1", schemas.StatusRejected, 4)
	put(t, s, r3)
	if es, _, _ = s.Entity("order-1"); es.InFlightKey != "k2" {
		t.Fatalf("other key cleared in-flight: %+v", es)
	}

	// k2 succeeds with a lower version than stored: version stays the max.
	r2.Status = schemas.StatusSucceeded
	r2.EntityVersion = 2
	put(t, s, r2)
	es, _, _ = s.Entity("order-1")
	if es.InFlightKey != "" || es.Version != 3 || es.LastKey != "k2" {
		t.Fatalf("after success: %+v", es)
	}

	// A failed record never moves the version.
	r4 := rec("k4", "order-1", schemas.StatusFailed, 4)
	r4.EntityVersion = 9
	put(t, s, r4)
	r5 := rec("k5", "order-1", schemas.StatusSucceeded, 4)
	r5.EntityVersion = 5
	put(t, s, r5)
	if es, _, _ = s.Entity("order-1"); es.Version != 5 {
		t.Fatalf("version = %d, want 5", es.Version)
	}
}

func TestUnresolvedByPartition(t *testing.T) {
	s := openTest(t, t.TempDir())
	put(t, s,
		rec("a", "e1", schemas.StatusUnresolved, 1),
		rec("b", "e2", schemas.StatusUnresolved, 2),
		rec("c", "e3", schemas.StatusUnresolved, 2),
		rec("d", "e4", schemas.StatusInProgress, 2),
		rec("e", "e5", schemas.StatusUnresolved, 10),
		rec("f", "e6", schemas.StatusUnresolved, 12))

	for _, tc := range []struct {
		parts []int32
		limit int
		want  []string
	}{
		{[]int32{2}, 0, []string{"b", "c"}},
		{[]int32{1, 2}, 0, []string{"a", "b", "c"}},
		{[]int32{1}, 0, []string{"a"}},
		// Partition 1 must not match partition 10 or 12 by a shared prefix.
		{[]int32{10}, 0, []string{"e"}},
		{[]int32{3}, 0, nil},
		{nil, 0, nil},
		{[]int32{2, 1}, 2, []string{"b", "c"}},
		{[]int32{1, 2, 10}, 2, []string{"a", "b"}},
	} {
		got, err := s.Unresolved(tc.parts, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(keys(got)) != fmt.Sprint(tc.want) {
			t.Errorf("Unresolved(%v, %d) = %v, want %v", tc.parts, tc.limit, keys(got), tc.want)
		}
	}
}

func TestPartitionString(t *testing.T) {
	for p, want := range map[int32]string{0: "0000000000", 7: "0000000007", 2147483647: "2147483647"} {
		if got := partitionString(p); got != want {
			t.Errorf("partitionString(%d) = %q, want %q", p, got, want)
		}
	}
}

func TestCountUnresolved(t *testing.T) {
	s := openTest(t, t.TempDir())
	for i, p := range []int32{0, 0, 1, 2} {
		put(t, s, rec(fmt.Sprintf("u%d", i), "e", schemas.StatusUnresolved, p))
	}
	put(t, s, rec("done", "e", schemas.StatusSucceeded, 0))
	if n, err := s.CountUnresolved([]int32{0, 2}); err != nil || n != 3 {
		t.Fatalf("count %d, %v; want 3", n, err)
	}
}

// TestAppendRecordKey: Lookup's key, built in one buffer, is the key the
// batch writes a record under (recordKeyOf), escapes included.
func TestAppendRecordKey(t *testing.T) {
	for _, c := range [][2]string{{"order-1", "k"}, {"a\x00b", "k\x01"}, {"\x01", "x"}, {"", ""}, {"é", "ü/1"}} {
		r := schemas.Record{Entity: c[0], IdempotencyKey: c[1]}
		if got, want := appendRecordKey(nil, c[0], c[1]), recordKeyOf(&r); !bytes.Equal(got, want) {
			t.Errorf("appendRecordKey(%q, %q) = %q, want %q", c[0], c[1], got, want)
		}
	}
}

// TestWriteSortedKeyOrder: a Commit's entries reach the Pebble batch in
// key order (the memtable inserts each next to the previous one), deletes
// as deletes, and a key written twice fails the batch.
func TestWriteSortedKeyOrder(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var te tableEntries
	for _, k := range []string{"s/succeeded/b", "r/b", "x/b", "e/1", "r/a", "p/0000000001"} {
		_ = te.Set([]byte(k), []byte("v-"+k), nil)
	}
	_ = te.Delete([]byte("s/in_progress/b"), nil)
	pb := s.db.NewBatch()
	defer pb.Close()
	if err := te.writeSorted(pb); err != nil {
		t.Fatal(err)
	}
	var got []string
	for r := pb.Reader(); ; {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, fmt.Sprintf("%s %s=%s", kind, k, v))
	}
	want := []string{"SET e/1=v-e/1", "SET p/0000000001=v-p/0000000001", "SET r/a=v-r/a", "SET r/b=v-r/b",
		"DEL s/in_progress/b=", "SET s/succeeded/b=v-s/succeeded/b", "SET x/b=v-x/b"}
	if !slices.Equal(got, want) {
		t.Fatalf("batch order:\n got %q\nwant %q", got, want)
	}
	_ = te.Set([]byte("r/a"), nil, nil)
	pb2 := s.db.NewBatch()
	defer pb2.Close()
	if err := te.writeSorted(pb2); err == nil || !strings.Contains(err.Error(), "written twice") {
		t.Fatalf("a key written twice: %v", err)
	}
}
