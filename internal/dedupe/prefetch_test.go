package dedupe

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceflight/onceflight/schemas"
)

// TestLookupPrefetchedSeesLaterWrites: a record read ahead (Prefetch) is
// answered from only while no write of its key returned since; once one
// did — a batch that wrote the key (Commit, CommitSyncLater, CommitIngest),
// or a write that does not say which keys it wrote (Prune) — the lookup
// reads the store again and sees the write, as Lookup would.
func TestLookupPrefetchedSeesLaterWrites(t *testing.T) {
	s := openTest(t, t.TempDir())
	a, b, c := rec("ka", "e1", schemas.StatusInProgress, 0), rec("kb", "e1", schemas.StatusSucceeded, 0), rec("kc", "e2", schemas.StatusSucceeded, 0)
	put(t, s, a, b)
	keys := []PrefetchKey{{"e1", "ka"}, {"e1", "kb"}, {"e2", "kc"}, {"e9", "kz"}}
	pf := make([]Prefetched, len(keys))
	s.Prefetch(keys, pf)
	for i, p := range pf {
		if !p.read || p.found != (i < 2) {
			t.Fatalf("prefetched %v: read %v found %v", keys[i], p.read, p.found)
		}
	}
	// ka is rewritten and kc written after the read; kb and kz are not.
	a2 := a
	a2.Status, a2.Hash = schemas.StatusSucceeded, "sha256:h-ka-2"
	commits := map[string]func(*Batch) error{
		"Commit":       (*Batch).Commit,
		"CommitIngest": (*Batch).CommitIngest,
		"CommitSyncLater": func(b *Batch) error {
			wait, err := b.CommitSyncLater()
			if err == nil {
				err = wait()
			}
			return err
		},
	}
	for name, commit := range commits {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, t.TempDir())
			put(t, s, a, b)
			pf := make([]Prefetched, len(keys))
			s.Prefetch(keys, pf)
			kbRaw := pf[1].raw
			bt := s.NewBatch()
			bt.PutRecord(a2)
			bt.PutRecord(c)
			if err := commit(bt); err != nil {
				t.Fatal(err)
			}
			got, _, ok, err := s.LookupPrefetched("e1", "ka", &pf[0])
			if err != nil || !ok || got.Status != schemas.StatusSucceeded || got.Hash != a2.Hash {
				t.Errorf("ka rewritten after the read: %v %v %v %v, want the rewrite", got.Status, got.Hash, ok, err)
			}
			if _, _, ok, err := s.LookupPrefetched("e2", "kc", &pf[2]); err != nil || !ok {
				t.Errorf("kc written after it was read absent: found %v (%v)", ok, err)
			}
			// Not written since: answered from the value read ahead (its
			// very bytes), unless kb shares a slot with ka or kc.
			got, raw, ok, err := s.LookupPrefetched("e1", "kb", &pf[1])
			if err != nil || !ok || got.Hash != b.Hash {
				t.Fatalf("kb: %+v %v %v", got, ok, err)
			}
			if sl := pf[1].slot; sl != s.recWrites.slot([]byte(scope("e1", "ka"))) && sl != s.recWrites.slot([]byte(scope("e2", "kc"))) && &raw[0] != &kbRaw[0] {
				t.Errorf("kb, not written since it was read, was looked up again")
			}
			if _, _, ok, err := s.LookupPrefetched("e9", "kz", &pf[3]); err != nil || ok {
				t.Errorf("kz: found %v (%v)", ok, err)
			}
		})
	}

	// A write through guard alone (Prune's, the format's reset) makes
	// every record read ahead stale.
	pf = make([]Prefetched, len(keys))
	s.Prefetch(keys, pf)
	if err := s.guard(func() error { return s.db.Delete(recordKey(scope("e1", "kb")), pebble.Sync) }); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := s.LookupPrefetched("e1", "kb", &pf[1]); err != nil || ok {
		t.Errorf("kb deleted after the read: found %v (%v)", ok, err)
	}
	// And Prune's own writes: a record past key memory is forgotten.
	old := fullRec("kold", "e3", schemas.StatusSucceeded, t0.Add(-memory-day))
	put(t, s, old)
	want, _, _ := s.Lookup("e3", "kold")
	s.Prefetch([]PrefetchKey{{"e3", "kold"}}, pf[:1])
	if !pf[0].found {
		t.Fatal("kold not read ahead")
	}
	pruneAll(t, s, t0)
	now, nowOK, err := s.Lookup("e3", "kold")
	if err != nil || (nowOK && now.Hash == want.Hash && now.Data != nil) {
		t.Fatalf("Prune left kold as it was: %+v %v %v", now, nowOK, err)
	}
	got, _, ok, err := s.LookupPrefetched("e3", "kold", &pf[0])
	if err != nil || ok != nowOK || got.Hash != now.Hash || len(got.Data) != len(now.Data) {
		t.Errorf("kold pruned after the read: %+v %v (%v), want %+v %v", got, ok, err, now, nowOK)
	}
}

// TestLookupPrefetchedOther: a value read ahead answers only its own key,
// once; another key, or the same key again, is looked up.
func TestLookupPrefetchedOther(t *testing.T) {
	s := openTest(t, t.TempDir())
	a, b := rec("ka", "e1", schemas.StatusSucceeded, 0), rec("kb", "e1", schemas.StatusSucceeded, 0)
	put(t, s, a, b)
	pf := make([]Prefetched, 1)
	s.Prefetch([]PrefetchKey{{"e1", "ka"}}, pf)
	if got, _, ok, err := s.LookupPrefetched("e1", "kb", &pf[0]); err != nil || !ok || got.IdempotencyKey != "kb" {
		t.Fatalf("kb with ka's prefetch: %+v %v %v", got, ok, err)
	}
	if got, _, ok, err := s.LookupPrefetched("e1", "ka", &pf[0]); err != nil || !ok || got.IdempotencyKey != "ka" {
		t.Fatalf("ka: %+v %v %v", got, ok, err)
	}
	if pf[0].For("e1", "ka") {
		t.Errorf("a value read ahead is still offered after its use")
	}
	if got, _, ok, err := s.LookupPrefetched("e1", "ka", &pf[0]); err != nil || !ok || got.IdempotencyKey != "ka" {
		t.Fatalf("ka again: %+v %v %v", got, ok, err)
	}
}

// TestLookupPrefetchedSeesConcurrentCommits: keys rewritten by a committer
// while readers read them ahead in batches and then look them up: every
// lookup returns the version committed before it began, or a later one.
func TestLookupPrefetchedSeesConcurrentCommits(t *testing.T) {
	s := openTest(t, t.TempDir())
	const keys, writes = 64, 3000
	key := func(i int) string { return fmt.Sprintf("key-%03d", i) }
	var committed [keys]atomic.Int64 // the version last committed, per key
	var stale atomic.Int64
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			batch := make([]PrefetchKey, 16)
			pf := make([]Prefetched, len(batch))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for j := range batch {
					batch[j] = PrefetchKey{Entity: "ent", Key: key((i*31 + j*7 + r) % keys)}
				}
				s.Prefetch(batch, pf)
				runtime.Gosched() // let the committer write meanwhile
				for j, k := range batch {
					want := committed[(i*31+j*7+r)%keys].Load()
					got, _, ok, err := s.LookupPrefetched(k.Entity, k.Key, &pf[j])
					if err != nil {
						t.Error(err)
						return
					}
					if v := int64(got.Attempts); want > 0 && (!ok || v < want) {
						stale.Add(1)
						t.Errorf("%s: version %d (found %v), %d was committed before the lookup began", k.Key, v, ok, want)
						return
					}
				}
			}
		}()
	}
	for i := 1; i <= writes && stale.Load() == 0; i++ {
		k := (i * 13) % keys
		r := rec(key(k), "ent", schemas.StatusSucceeded, 0)
		r.Attempts = i
		b := s.NewBatch()
		b.PutRecord(r)
		if err := b.CommitNoSync(); err != nil {
			t.Fatal(err)
		}
		committed[k].Store(int64(i))
	}
	close(stop)
	readers.Wait()
}

// TestPrefetchFromBlobFiles: records whose values a flush put in blob
// files (and one still in the memtable, and keys never written), read
// ahead in no order, are what Lookup reads, byte for byte.
func TestPrefetchFromBlobFiles(t *testing.T) {
	s := openTest(t, t.TempDir())
	var keys []PrefetchKey
	for i := range 300 {
		r := fullRec(fmt.Sprintf("k-%04d", (i*7919)%1000), fmt.Sprintf("e-%d", i%17), schemas.StatusSucceeded, t0)
		put(t, s, r)
		keys = append(keys, PrefetchKey{r.Entity, r.IdempotencyKey})
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := s.db.Metrics(); m.BlobFiles.LiveCount == 0 {
		t.Fatalf("no blob file after the flush: %+v", m.BlobFiles)
	}
	last := fullRec("k-mem", "e-1", schemas.StatusSucceeded, t0)
	put(t, s, last) // in the memtable
	keys = append(keys, PrefetchKey{last.Entity, last.IdempotencyKey}, PrefetchKey{"e-1", "never"}, PrefetchKey{"e-404", "k-0001"})
	// The poll's order: every third key, then the rest backwards.
	var poll []PrefetchKey
	for i := 0; i < len(keys); i += 3 {
		poll = append(poll, keys[i])
	}
	for i := len(keys) - 1; i >= 0; i-- {
		if i%3 != 0 {
			poll = append(poll, keys[i])
		}
	}
	pf := make([]Prefetched, len(poll))
	s.Prefetch(poll, pf)
	for i, k := range poll {
		if !pf[i].read {
			t.Fatalf("%v not read ahead", k)
		}
		want, wantRaw, wantOK, err := s.LookupBytes(k.Entity, k.Key)
		if err != nil {
			t.Fatal(err)
		}
		got, raw, ok, err := s.LookupPrefetched(k.Entity, k.Key, &pf[i])
		if err != nil || ok != wantOK || string(raw) != string(wantRaw) || got.Hash != want.Hash {
			t.Fatalf("%v: found %v (%v), %d bytes; Lookup: found %v, %d bytes", k, ok, err, len(raw), wantOK, len(wantRaw))
		}
	}
}

// TestPrefetchedValue: Value gives the stored bytes Prefetch read (what
// LookupBytes returns), nil and not found for an absent key, and unread
// for a key Prefetch was not given.
func TestPrefetchedValue(t *testing.T) {
	s := openTest(t, t.TempDir())
	a := rec("ka", "e1", schemas.StatusSucceeded, 0)
	put(t, s, a)
	_, want, _, err := s.LookupBytes("e1", "ka")
	if err != nil {
		t.Fatal(err)
	}
	pf := make([]Prefetched, 2)
	s.Prefetch([]PrefetchKey{{"e1", "ka"}, {"e1", "kz"}}, pf)
	if raw, found, read := pf[0].Value(); !read || !found || string(raw) != string(want) {
		t.Errorf("ka: %q found %v read %v, want %q", raw, found, read, want)
	}
	if raw, found, read := pf[1].Value(); !read || found || raw != nil {
		t.Errorf("kz (absent): %q found %v read %v", raw, found, read)
	}
	var none Prefetched
	if _, _, read := none.Value(); read {
		t.Error("a key never prefetched reads as read")
	}
}
