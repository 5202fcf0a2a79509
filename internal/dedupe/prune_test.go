package dedupe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceflight/onceflight/schemas"
)

const (
	day    = 24 * time.Hour
	keep   = 7 * day
	memory = 90 * day
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// fullRec is a realistic final record: real-length fingerprint and hashes,
// data, result, error message, resolution and trace.
func fullRec(key, entity string, status schemas.Status, finished time.Time) schemas.Record {
	started := finished.Add(-150 * time.Millisecond)
	fin := finished
	deadline := finished.Add(time.Hour)
	r := schemas.Record{
		IdempotencyKey: key,
		Entity:         entity,
		Action:         "payments.refund",
		Status:         status,
		Fingerprint:    sha("fp/" + key),
		Attempts:       2,
		EntityVersion:  3,
		Result:         json.RawMessage(`{"body":{"amount":1250,"refund_id":"re_7731","state":"pending"},"http_status":201}`),
		Command:        schemas.CommandRef{ID: "5b0c1d7e-9b8f-4c62-a1f4-" + key, Source: "urn:shop:orders", Partition: 3, Offset: 123456},
		StartedAt:      &started,
		FinishedAt:     &fin,
		Executor:       "onceflight-7d9f8c-x2k4q",
		Epoch:          17,
		FencingToken:   4411,
		Deadline:       &deadline,
		TraceParent:    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		Data:           json.RawMessage(`{"amount":1250,"currency":"EUR","order":"order-1042","reason":"customer request"}`),
		Hash:           sha("h/" + key),
		PrevHash:       sha("p/" + key),
	}
	if status != schemas.StatusSucceeded {
		r.Error = &schemas.Error{Code: schemas.CodeConnectorRejected, Message: "the payment provider declined the refund: card account closed"}
	}
	return r
}

func prune(t testing.TB, s *Store, now time.Time, opts ...PruneOption) PruneStats {
	t.Helper()
	st, err := s.Prune(context.Background(), now, keep, memory, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// pruneAll calls Prune until it reports no more work, summing the stats.
func pruneAll(t testing.TB, s *Store, now time.Time, opts ...PruneOption) (PruneStats, int) {
	t.Helper()
	var sum PruneStats
	for calls := 1; ; calls++ {
		st := prune(t, s, now, opts...)
		sum.Stubbed += st.Stubbed
		sum.Forgotten += st.Forgotten
		sum.Indexed += st.Indexed
		sum.Skipped += st.Skipped
		if !st.More {
			return sum, calls
		}
		if calls > 100000 {
			t.Fatal("Prune never finishes")
		}
	}
}

// allKeys lists every key in the store under a prefix.
func allKeys(t testing.TB, s *Store, prefix string) []string {
	t.Helper()
	opts := &pebble.IterOptions{}
	if prefix != "" {
		opts.LowerBound, opts.UpperBound = []byte(prefix), prefixEnd([]byte(prefix))
	}
	it, err := s.db.NewIter(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, string(it.Key()))
	}
	return out
}

// checkIndexes verifies that records and index entries agree both ways:
// every record has exactly its entries (one prune entry if prunable), and
// every entry names a stored record that has it.
func checkIndexes(t testing.TB, s *Store) {
	t.Helper()
	entries := map[string]bool{}
	for _, p := range []string{prefixStatus, prefixUnresolved, prefixPruneFull, prefixPruneStub} {
		for _, k := range allKeys(t, s, p) {
			entries[k] = true
		}
	}
	owned := map[string]bool{}
	for _, rk := range allKeys(t, s, prefixRecord) {
		key := rk[len(prefixRecord):]
		r, ok := lookupScoped(t, s, key)
		if !ok {
			t.Fatalf("record %q listed but not found", key)
		}
		var want []string
		if statusIndexed(r.Status) {
			want = append(want, statusPrefix(r.Status)+key)
		}
		if r.Status == schemas.StatusUnresolved {
			want = append(want, unresolvedPrefix(r.Command.Partition)+key)
		}
		for _, k := range want {
			if !entries[k] {
				t.Errorf("record %q (%s) lacks index entry %q", key, r.Status, k)
			}
			owned[k] = true
		}
		if prunable(&r) {
			f, k := pruneIndexKey(prefixPruneFull, &r), pruneIndexKey(prefixPruneStub, &r)
			if entries[f] == entries[k] {
				t.Errorf("record %q: prune entries f=%v k=%v, want exactly one", key, entries[f], entries[k])
			}
			owned[f], owned[k] = true, true
		}
	}
	for k := range entries {
		if !owned[k] {
			t.Errorf("index entry %q names no record that has it", k)
		}
	}
}

// lookupScoped reads the record stored under scope sc (a record key
// without its prefix).
func lookupScoped(t testing.TB, s *Store, sc string) (schemas.Record, bool) {
	t.Helper()
	r, ok, err := s.lookupIn(s.db, sc)
	if err != nil {
		t.Fatal(err)
	}
	return r, ok
}

func mustLookupTB(t testing.TB, s *Store, key string) (schemas.Record, bool) {
	t.Helper()
	return lookupAnyEntity(t, s, key)
}

func putTB(t testing.TB, s *Store, recs ...schemas.Record) {
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

// wantStub checks that got is the stub of full: what answers a late repeat
// is there, the bodies are not.
func wantStub(t *testing.T, got, full schemas.Record) {
	t.Helper()
	if got.IdempotencyKey != full.IdempotencyKey || got.Entity != full.Entity || got.Action != full.Action ||
		got.Status != full.Status || got.Fingerprint != full.Fingerprint || got.Command != full.Command ||
		got.Epoch != full.Epoch {
		t.Errorf("stub lost identity fields:\n got %+v\nfull %+v", got, full)
	}
	if got.FinishedAt == nil || !got.FinishedAt.Equal(*full.FinishedAt) {
		t.Errorf("stub finished_at = %v, want %v", got.FinishedAt, full.FinishedAt)
	}
	if got.Data != nil || got.Result != nil || got.StartedAt != nil || got.Deadline != nil || got.TraceParent != "" ||
		got.FencingToken != 0 || got.Executor != "" || got.Resolution != nil || got.Hash != "" || got.PrevHash != "" ||
		got.Attempts != 0 || got.EntityVersion != 0 {
		t.Errorf("stub kept bodies: %+v", got)
	}
	switch {
	case full.Error == nil && got.Error != nil:
		t.Errorf("stub error = %+v, want nil", got.Error)
	case full.Error != nil && (got.Error == nil || got.Error.Code != full.Error.Code || got.Error.Message != ""):
		t.Errorf("stub error = %+v, want code %q only", got.Error, full.Error.Code)
	}
}

// unprunable writes old records Prune must never touch.
func unprunable(t *testing.T, s *Store) []schemas.Record {
	old := t0.Add(-400 * day)
	var recs []schemas.Record
	for i, st := range []schemas.Status{schemas.StatusUnresolved, schemas.StatusInProgress, schemas.StatusHeld} {
		r := fullRec("keep-"+string(st), fmt.Sprintf("ent-keep-%d", i), st, old)
		if st != schemas.StatusUnresolved {
			r.FinishedAt = nil // not final: no finish time...
		}
		recs = append(recs, r)
	}
	// ...and one non-final record that has a finish time anyway.
	odd := fullRec("keep-held-finished", "ent-keep-9", schemas.StatusHeld, old)
	recs = append(recs, odd)
	putTB(t, s, recs...)
	return recs
}

func assertUntouched(t *testing.T, s *Store, recs []schemas.Record) {
	t.Helper()
	for _, want := range recs {
		got, ok := mustLookupTB(t, s, want.IdempotencyKey)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%s record %q changed: ok=%v\n got %+v\nwant %+v", want.Status, want.IdempotencyKey, ok, got, want)
		}
	}
}

func TestPruneStubsPastKeep(t *testing.T) {
	s := openTest(t, t.TempDir())
	keepers := unprunable(t, s)
	var old []schemas.Record
	for i, st := range []schemas.Status{schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected} {
		old = append(old, fullRec(fmt.Sprintf("old-%d", i), fmt.Sprintf("ent-%d", i), st, t0))
	}
	young := fullRec("young", "ent-y", schemas.StatusSucceeded, t0.Add(2*day))
	putTB(t, s, append(old, young)...)

	now := t0.Add(keep + time.Hour)
	st := prune(t, s, now)
	if st.Stubbed != len(old) || st.Forgotten != 0 || st.More {
		t.Fatalf("stats %+v, want %d stubbed", st, len(old))
	}
	for _, full := range old {
		got, ok := mustLookupTB(t, s, full.IdempotencyKey)
		if !ok {
			t.Fatalf("%q gone after keep; want a stub", full.IdempotencyKey)
		}
		wantStub(t, got, full)
	}
	assertByStatus(t, s, schemas.StatusSucceeded, "old-0", "young")
	assertByStatus(t, s, schemas.StatusFailed, "old-1")
	assertUntouched(t, s, append(keepers, young))
	checkIndexes(t, s)

	// Idempotent: nothing is due again.
	if st := prune(t, s, now); st != (PruneStats{}) {
		t.Fatalf("second prune %+v, want nothing", st)
	}
	checkIndexes(t, s)
}

func TestPruneForgetsPastMemory(t *testing.T) {
	s := openTest(t, t.TempDir())
	keepers := unprunable(t, s)
	stubbed := fullRec("a", "ent-a", schemas.StatusSucceeded, t0)
	direct := fullRec("b", "ent-b", schemas.StatusRejected, t0) // never pruned before memory: forgotten at once
	young := fullRec("c", "ent-c", schemas.StatusSucceeded, t0.Add(memory))
	putTB(t, s, stubbed)
	if st := prune(t, s, t0.Add(keep+time.Minute)); st.Stubbed != 1 {
		t.Fatalf("stats %+v, want 1 stubbed", st)
	}
	putTB(t, s, direct, young)

	st := prune(t, s, t0.Add(memory+time.Minute))
	if st.Forgotten != 2 {
		t.Fatalf("stats %+v, want 2 forgotten", st)
	}
	for _, k := range []string{"a", "b"} {
		if _, ok := mustLookupTB(t, s, k); ok {
			t.Errorf("%q still found past memory", k)
		}
	}
	assertByStatus(t, s, schemas.StatusSucceeded, "c")
	assertByStatus(t, s, schemas.StatusRejected)
	for _, p := range []string{prefixPruneFull, prefixPruneStub} {
		for _, k := range allKeys(t, s, p) {
			if strings.HasSuffix(k, "/a") || strings.HasSuffix(k, "/b") {
				t.Errorf("index entry %q left", k)
			}
		}
	}
	// Entity state is kept (Version is business state).
	if es, ok, _ := s.Entity("ent-a"); !ok || es.Version != 3 {
		t.Errorf("entity ent-a = %+v, %v; want kept", es, ok)
	}
	assertUntouched(t, s, append(keepers, young))
	checkIndexes(t, s)
}

func TestPruneLimitAndResume(t *testing.T) {
	s := openTest(t, t.TempDir())
	const n = 1000
	for i := 0; i < n; i += 250 {
		b := s.NewBatch()
		for j := i; j < i+250; j++ {
			b.PutRecord(fullRec(fmt.Sprintf("k%05d", j), fmt.Sprintf("e%d", j), schemas.StatusSucceeded, t0.Add(time.Duration(j)*time.Second)))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(keep + time.Hour)
	st, err := s.Prune(context.Background(), now, keep, memory, PruneLimit(300))
	if err != nil {
		t.Fatal(err)
	}
	if st.Stubbed != 300 || !st.More {
		t.Fatalf("stats %+v, want 300 stubbed and more", st)
	}
	// Oldest first: the first 300 by finished_at are the stubs.
	if r, _ := mustLookupTB(t, s, "k00299"); r.Data != nil {
		t.Error("k00299 not stubbed")
	}
	if r, _ := mustLookupTB(t, s, "k00300"); r.Data == nil {
		t.Error("k00300 stubbed beyond the limit")
	}
	sum, calls := pruneAll(t, s, now, PruneLimit(300))
	if sum.Stubbed != n-300 || calls != 3 {
		t.Fatalf("rest: %+v in %d calls, want %d in 3", sum, calls, n-300)
	}
	sum, _ = pruneAll(t, s, now.Add(memory))
	if sum.Forgotten != n {
		t.Fatalf("forget: %+v, want %d", sum, n)
	}
	if k := allKeys(t, s, prefixRecord); len(k) != 0 {
		t.Fatalf("%d records left", len(k))
	}
	checkIndexes(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	putTB(t, s, fullRec("z", "ez", schemas.StatusSucceeded, t0))
	if _, err := s.Prune(ctx, now, keep, memory); err == nil {
		t.Error("Prune with a cancelled context: no error")
	}
	if _, err := s.Prune(context.Background(), now, 2*day, day); err == nil {
		t.Error("memory < keep accepted")
	}
}

// TestPruneDoesNotClobberNewerRecord writes a newer record of a candidate's
// key between Prune's scan and its write.
func TestPruneDoesNotClobberNewerRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		now  time.Time
	}{
		{"stub", t0.Add(keep + time.Hour)},
		{"forget", t0.Add(memory + time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, t.TempDir())
			putTB(t, s, fullRec("k", "ent", schemas.StatusSucceeded, t0), fullRec("other", "ent2", schemas.StatusSucceeded, t0))
			// A later execution of the key (released, or forgotten and
			// run again), committed while Prune holds its candidates.
			newer := fullRec("k", "ent", schemas.StatusFailed, tc.now.Add(-time.Minute))
			newer.Data = json.RawMessage(`{"second":"run"}`)
			var once sync.Once
			s.pruneHook = func() { once.Do(func() { putTB(t, s, newer) }) }

			st := prune(t, s, tc.now)
			if st.Stubbed+st.Forgotten != 1 || st.Skipped != 1 {
				t.Fatalf("stats %+v, want 1 pruned (other) and 1 skipped (k)", st)
			}
			got, ok := mustLookupTB(t, s, "k")
			if !ok || !reflect.DeepEqual(got, newer) {
				t.Fatalf("newer record clobbered: ok=%v\n got %+v\nwant %+v", ok, got, newer)
			}
			assertByStatus(t, s, schemas.StatusFailed, "k")
			checkIndexes(t, s)
		})
	}
}

// TestPruneLateOldRecord: a record with an old FinishedAt committed during a
// Prune call (journal replay) sorts before the cursor; it must still be
// pruned by a later call.
func TestPruneLateOldRecord(t *testing.T) {
	s := openTest(t, t.TempDir())
	putTB(t, s, fullRec("b", "e", schemas.StatusSucceeded, t0.Add(time.Hour)))
	late := fullRec("a", "e", schemas.StatusSucceeded, t0)
	var once sync.Once
	s.pruneHook = func() { once.Do(func() { putTB(t, s, late) }) }
	now := t0.Add(keep + 2*time.Hour)
	sum, _ := pruneAll(t, s, now)
	s.pruneHook = nil
	sum2, _ := pruneAll(t, s, now)
	if sum.Stubbed+sum2.Stubbed != 2 {
		t.Fatalf("stubbed %d+%d, want 2", sum.Stubbed, sum2.Stubbed)
	}
	if r, _ := mustLookupTB(t, s, "a"); r.Data != nil {
		t.Fatal("late old record never stubbed")
	}
	checkIndexes(t, s)
}

// TestPruneConcurrentWriter runs Prune in a loop while a writer commits
// batches that overwrite old keys with new records and add old ones; run
// with -race. Every key must end as the writer's last record (new ones are
// not due) and the indexes must agree.
func TestPruneConcurrentWriter(t *testing.T) {
	s := openTest(t, t.TempDir())
	const n = 2000
	for i := 0; i < n; i += 500 {
		b := s.NewBatch()
		for j := i; j < i+500; j++ {
			b.PutRecord(fullRec(fmt.Sprintf("k%05d", j), fmt.Sprintf("e%d", j%50), schemas.StatusSucceeded, t0))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(memory - day) // old ones are due for stubbing only
	newer := func(j int) schemas.Record {
		r := fullRec(fmt.Sprintf("k%05d", j), fmt.Sprintf("e%d", j%50), schemas.StatusFailed, now.Add(-time.Minute))
		r.Data = json.RawMessage(fmt.Sprintf(`{"j":%d,"run":2}`, j))
		return r
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 0; i < n; i += 20 { // every 7th key overwritten, interleaved with pruning
			b := s.NewBatch()
			for j := i; j < i+20; j++ {
				if j%7 == 0 {
					b.PutRecord(newer(j))
				}
			}
			b.PutRecord(fullRec(fmt.Sprintf("late%05d", i), "late", schemas.StatusSucceeded, t0.Add(time.Hour)))
			if err := b.Commit(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		if _, err := s.Prune(context.Background(), now, keep, memory, PruneLimit(50)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	pruneAll(t, s, now)
	for j := 0; j < n; j++ {
		got, _ := mustLookupTB(t, s, fmt.Sprintf("k%05d", j))
		if j%7 == 0 {
			if !reflect.DeepEqual(got, newer(j)) {
				t.Fatalf("k%05d: newer record lost: %+v", j, got)
			}
		} else if got.Data != nil || got.Status != schemas.StatusSucceeded {
			t.Fatalf("k%05d not stubbed: %+v", j, got)
		}
	}
	for _, k := range allKeys(t, s, prefixRecord+"late") {
		if r, _ := lookupScoped(t, s, k[len(prefixRecord):]); r.Data != nil {
			t.Fatalf("%s not stubbed", k)
		}
	}
	checkIndexes(t, s)
}

// TestPruneUpgradeBackfill: a store written before the prune index (no
// f/ entries, no m/prune) is indexed by Prune in bounded steps, resumes
// after a reopen, and is then pruned like any other.
func TestPruneUpgradeBackfill(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 700
	var recs []schemas.Record
	for j := 0; j < n; j++ {
		recs = append(recs, fullRec(fmt.Sprintf("k%05d", j), "e", schemas.StatusSucceeded, t0))
	}
	recs = append(recs, fullRec("unres", "e", schemas.StatusUnresolved, t0))
	putTB(t, s, recs...)
	// Make it an old store: drop the index and its state.
	b := s.db.NewBatch()
	for _, k := range append(allKeys(t, s, prefixPruneFull), keyPruneMeta) {
		b.Delete([]byte(k), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openTest(t, dir)
	if s.prune.indexed {
		t.Fatal("old store taken as indexed")
	}
	now := t0.Add(keep + time.Hour)
	st := prune(t, s, now, PruneLimit(300))
	if st.Indexed != 300 || !st.More {
		t.Fatalf("first call %+v, want 300 indexed and more", st)
	}
	s.Close()
	s = openTest(t, dir) // resumes from m/prune
	sum, _ := pruneAll(t, s, now, PruneLimit(300))
	if sum.Indexed != n-300 || sum.Stubbed+st.Stubbed != n {
		t.Fatalf("rest %+v (first %+v), want %d indexed, %d stubbed in all", sum, st, n-300, n)
	}
	if !s.prune.indexed {
		t.Fatal("backfill never finished")
	}
	assertUntouched(t, s, recs[n:])
	checkIndexes(t, s)

	s.Close()
	s = openTest(t, dir)
	if !s.prune.indexed {
		t.Fatal("indexed state not persisted")
	}
}

// tableBytes flushes and compacts everything, then returns the size of all
// sstables and live blob files (records are separated into blob files,
// store.go) and the number of live keys.
func tableBytes(t testing.TB, s *Store) (int64, int) {
	t.Helper()
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := s.db.Metrics()
	return m.Total().TablesSize + int64(m.BlobFiles.LiveSize), len(allKeys(t, s, ""))
}

// TestPruneBoundsDisk: a steady stream of new keys, one day at a time, with
// Prune run each day. Live records are bounded by memory's worth of days,
// and the compacted size stops growing once the stream is older than memory.
func TestPruneBoundsDisk(t *testing.T) {
	s := openTest(t, t.TempDir())
	const (
		perDay = 300
		mem    = 20 * day
		kp     = 5 * day
		days   = 60
	)
	var sizes []int64
	for d := 0; d < days; d++ {
		now := t0.Add(time.Duration(d) * day)
		b := s.NewBatch()
		for j := 0; j < perDay; j++ {
			key := fmt.Sprintf("d%03d-%04d", d, j)
			b.PutRecord(fullRec(key, "ent-"+key, schemas.StatusSucceeded, now))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		for {
			st, err := s.Prune(context.Background(), now, kp, mem)
			if err != nil {
				t.Fatal(err)
			}
			if !st.More {
				break
			}
		}
		// Records finished within mem of now (today included) are kept.
		live := len(allKeys(t, s, prefixRecord))
		if want := perDay * min(d+1, int(mem/day)+1); live != want {
			t.Fatalf("day %d: %d records, want %d", d, live, want)
		}
		if d%10 == 9 {
			size, nkeys := tableBytes(t, s)
			sizes = append(sizes, size)
			t.Logf("day %d: %d live keys, %d table bytes", d, nkeys, size)
		}
	}
	checkIndexes(t, s)
	// Days 29..59 are all in steady state (stream longer than mem): the size
	// must be flat, not grow with the days written.
	steady := sizes[2:]
	lo, hi := slices.Min(steady), slices.Max(steady)
	if hi > lo+lo/5 {
		t.Fatalf("steady-state table size grows: %v", sizes)
	}
	if total := int64(perDay * days); hi > total*1500/3 {
		t.Fatalf("size %d too large for %d keys written", hi, total)
	}
}

// TestPruneShrinksDisk: N old keys, pruned past memory and compacted, leave
// (almost) nothing on disk.
func TestPruneShrinksDisk(t *testing.T) {
	s := openTest(t, t.TempDir())
	const n = 3000
	for i := 0; i < n; i += 1000 {
		b := s.NewBatch()
		for j := i; j < i+1000; j++ {
			key := fmt.Sprintf("k%06d", j)
			// One entity for all: entity states are business state, which
			// Prune keeps, so only the keys' own bytes are measured.
			b.PutRecord(fullRec(key, "e", schemas.StatusSucceeded, t0))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	before, keysBefore := tableBytes(t, s)
	pruneAll(t, s, t0.Add(keep+day))
	stubs, keysStubs := tableBytes(t, s)
	pruneAll(t, s, t0.Add(memory+day))
	after, keysAfter := tableBytes(t, s)
	t.Logf("full: %d B %d keys; stubs: %d B %d keys; forgotten: %d B %d keys", before, keysBefore, stubs, keysStubs, after, keysAfter)
	if stubs*2 > before {
		t.Errorf("stubs take %d B, more than half of %d", stubs, before)
	}
	if keysAfter > 3 || after*50 > before { // m/prune, m/format and the entity's state stay
		t.Errorf("after forgetting: %d keys, %d B (was %d B)", keysAfter, after, before)
	}
}

// TestBytesPerKey logs what one key costs as a full record and as a stub:
// the logical bytes (key + value of the record and its index entries) and
// the compacted sstable bytes per key.
func TestBytesPerKey(t *testing.T) {
	s := openTest(t, t.TempDir())
	const n = 5000
	for i := 0; i < n; i += 1000 {
		b := s.NewBatch()
		for j := i; j < i+1000; j++ {
			key := fmt.Sprintf("refund-%08d", j)
			// One entity for all, so that per-entity state does not count.
			b.PutRecord(fullRec(key, "order-1042", schemas.StatusSucceeded, t0.Add(time.Duration(j)*time.Millisecond)))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	logical := func() float64 {
		var total int
		for _, p := range []string{prefixRecord, prefixStatus, prefixPruneFull, prefixPruneStub} {
			it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(p), UpperBound: prefixEnd([]byte(p))})
			if err != nil {
				t.Fatal(err)
			}
			for ok := it.First(); ok; ok = it.Next() {
				total += len(it.Key()) + len(it.Value())
			}
			it.Close()
		}
		return float64(total) / n
	}
	// Entity states are per entity, not per key: left out of both.
	fullLogical := logical()
	fullDisk, _ := tableBytes(t, s)
	pruneAll(t, s, t0.Add(keep+day))
	stubLogical := logical()
	stubDisk, _ := tableBytes(t, s)
	t.Logf("bytes per key (record + index entries): full record %.0f logical, %.0f on disk; stub %.0f logical, %.0f on disk",
		fullLogical, float64(fullDisk)/n, stubLogical, float64(stubDisk)/n)
	if stubLogical >= fullLogical/2 || stubDisk >= fullDisk/2 {
		t.Errorf("stub %.0f B is not much smaller than full %.0f B", stubLogical, fullLogical)
	}
	r, _ := mustLookupTB(t, s, "refund-00000001")
	raw, _ := json.Marshal(stubOf(&r))
	t.Logf("a stub value: %s", raw)
	if !bytes.Contains(raw, []byte(`"fingerprint"`)) {
		t.Error("stub without fingerprint")
	}
}

// BenchmarkPrune measures stubbing and forgetting, per record, over an
// index of b.N due records.
func BenchmarkPrune(b *testing.B) {
	for _, stage := range []string{"stub", "forget"} {
		b.Run(stage, func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const n = 20000
			for i := 0; i < n; i += 1000 {
				batch := s.NewBatch()
				for j := i; j < i+1000; j++ {
					key := fmt.Sprintf("refund-%08d", j)
					batch.PutRecord(fullRec(key, "order-"+key, schemas.StatusSucceeded, t0.Add(time.Duration(j)*time.Millisecond)))
				}
				if err := batch.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			now := t0.Add(keep + day)
			if stage == "forget" {
				pruneAll(b, s, now)
				now = t0.Add(memory + day)
			}
			// A week later the records are compacted, not in the memtable.
			tableBytes(b, s)
			b.ResetTimer()
			var done int
			for done < n {
				st, err := s.Prune(context.Background(), now, keep, memory)
				if err != nil {
					b.Fatal(err)
				}
				done += st.Stubbed + st.Forgotten
				if !st.More {
					break
				}
			}
			b.StopTimer()
			if done != n {
				b.Fatalf("pruned %d of %d", done, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
		})
	}
}

// TestForgetStubDeletesNoFullEntry: forgetting a stub deletes its k/ entry,
// not the f/ entry that stubbing already deleted: a table of tombstones
// over nothing, in the prune index's own tables, would be moved whole to
// the bottom level and stay (TestPruneShrinksDisk saw it in 2 runs of 5).
func TestForgetStubDeletesNoFullEntry(t *testing.T) {
	s := openTest(t, t.TempDir())
	b := s.NewBatch()
	for j := range 100 {
		b.PutRecord(fullRec(fmt.Sprintf("k%06d", j), "e", schemas.StatusSucceeded, t0))
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	pruneAll(t, s, t0.Add(keep+day))
	tableBytes(t, s) // flushed and compacted: no f/ entry is left
	pruneAll(t, s, t0.Add(memory+day))
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := s.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range levels {
		for _, tb := range level {
			if bytes.HasPrefix(tb.Smallest.UserKey, []byte(prefixPruneFull)) || bytes.HasPrefix(tb.Largest.UserKey, []byte(prefixPruneFull)) {
				t.Errorf("table %s [%q .. %q] after forgetting stubs: f/ tombstones written", tb.FileNum, tb.Smallest.UserKey, tb.Largest.UserKey)
			}
		}
	}
	if n := len(allKeys(t, s, prefixRecord)); n != 0 {
		t.Errorf("%d records left after forgetting", n)
	}
}
