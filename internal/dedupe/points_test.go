package dedupe

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/onceflight/onceflight/schemas"
)

func lookupFound(t testing.TB, s *Store, entity, key string) bool {
	t.Helper()
	_, ok, err := s.Lookup(entity, key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestLookupReusesIterator: lookups with no write between them share one
// iterator, and a write makes it stale.
//
// The keys looked up are stored: a key never written is answered by the
// presence filter without an iterator (presence.go).
func TestLookupReusesIterator(t *testing.T) {
	s := openTest(t, t.TempDir())
	put(t, s, rec("a", "e", schemas.StatusSucceeded, 0), rec("b", "e", schemas.StatusSucceeded, 0))
	lookupFound(t, s, "e", "a")
	if n := len(s.points.free); n != 1 {
		t.Fatalf("%d iterators kept after a lookup, want 1", n)
	}
	first := s.points.free[0].it
	lookupFound(t, s, "e", "b")
	if n := len(s.points.free); n != 1 || s.points.free[0].it != first {
		t.Fatalf("the second lookup did not reuse the first's iterator (%d kept)", n)
	}
	put(t, s, rec("a", "e", schemas.StatusSucceeded, 0))
	lookupFound(t, s, "e", "b")
	if n := len(s.points.free); n != 1 || s.points.free[0].it == first {
		t.Fatalf("a lookup after a write reused the iterator made before it (%d kept)", n)
	}
}

// TestLookupSeesEveryWrite: a lookup sees what every kind of write that
// returned before it wrote, though the lookups before them left an
// iterator to reuse: Commit, CommitNoSync, CommitIngest, and Prune's
// deletions.
func TestLookupSeesEveryWrite(t *testing.T) {
	s := openTest(t, t.TempDir())
	commits := map[string]func(*Batch) error{
		"Commit":       (*Batch).Commit,
		"CommitNoSync": (*Batch).CommitNoSync,
		"CommitIngest": (*Batch).CommitIngest,
	}
	for name, commit := range commits {
		key := "k-" + name
		if lookupFound(t, s, "ent", key) {
			t.Fatalf("%s: %q found before it was written", name, key)
		}
		b := s.NewBatch()
		b.PutRecord(fullRec(key, "ent", schemas.StatusSucceeded, t0))
		if err := commit(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !lookupFound(t, s, "ent", key) {
			t.Errorf("%s: %q not found after the commit returned", name, key)
		}
	}
	if st := prune(t, s, t0.Add(memory+time.Minute)); st.Forgotten != len(commits) {
		t.Fatalf("prune: %+v, want %d forgotten", st, len(commits))
	}
	for name := range commits {
		if lookupFound(t, s, "ent", "k-"+name) {
			t.Errorf("%q found after Prune forgot it", "k-"+name)
		}
	}
}

// TestLookupSeesConcurrentCommits: lookups racing a committer find every
// key whose commit returned before they began. The committer commits one
// key a batch, so nearly every lookup has a write just before it.
func TestLookupSeesConcurrentCommits(t *testing.T) {
	s := openTest(t, t.TempDir())
	const keys = 1500
	key := func(i int) string { return fmt.Sprintf("key-%05d", i) }
	var committed atomic.Int64
	var missed atomic.Int64
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := committed.Load()
				if n == 0 {
					continue
				}
				// The latest committed key, or an older one.
				k := int(n - 1)
				if (i+r)%3 == 0 {
					k = (i * 7919) % int(n)
				}
				if !lookupFound(t, s, "ent", key(k)) {
					missed.Add(1)
					t.Errorf("%q not found, committed before the lookup began", key(k))
				}
			}
		}()
	}
	for i := 0; i < keys && missed.Load() == 0; i++ {
		b := s.NewBatch()
		b.PutRecord(rec(key(i), "ent", schemas.StatusSucceeded, 0))
		if err := b.CommitNoSync(); err != nil {
			t.Fatal(err)
		}
		committed.Store(int64(i + 1))
	}
	close(stop)
	readers.Wait()
}

// TestPointItersDropped: the idle timer's drop closes the kept iterators,
// and Close closes those left (Pebble's Close fails on an open iterator).
func TestPointItersDropped(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, rec("a", "e", schemas.StatusSucceeded, 0)) // stored: read through an iterator
	lookupFound(t, s, "e", "a")
	if n, armed := len(s.points.free), s.points.armed; n != 1 || !armed {
		t.Fatalf("after a lookup: %d iterators kept, idle timer armed %v; want 1, true", n, armed)
	}
	s.dropIdlePointIters()
	if n, armed := len(s.points.free), s.points.armed; n != 0 || armed {
		t.Fatalf("after the idle drop: %d iterators kept, armed %v; want 0, false", n, armed)
	}
	lookupFound(t, s, "e", "a")
	if err := s.Close(); err != nil {
		t.Fatalf("Close with an iterator kept: %v", err)
	}
}

// TestLookupsInUseBounded: at most maxPointIters lookups hold an iterator
// at once; one more waits for a slot instead of making an iterator of its
// own, and proceeds when one is given back. (Thousands of entity
// goroutines preempted mid-lookup each held an iterator, and the blocks
// and memtables it pinned, before the bound.)
func TestLookupsInUseBounded(t *testing.T) {
	s := openTest(t, t.TempDir())
	put(t, s, rec("a", "e", schemas.StatusSucceeded, 0))
	type held struct {
		it *pebble.Iterator
		w  uint64
	}
	var hold []held
	for range maxPointIters {
		it, w, err := s.getPointIter()
		if err != nil {
			t.Fatal(err)
		}
		hold = append(hold, held{it, w})
	}
	done := make(chan bool)
	go func() { done <- lookupFound(t, s, "e", "a") }()
	select {
	case <-done:
		t.Fatalf("a lookup ran while %d iterators were in use", maxPointIters)
	case <-time.After(50 * time.Millisecond):
	}
	s.putPointIter(hold[0].it, hold[0].w)
	if !<-done {
		t.Fatal("the waiting lookup did not find the stored key")
	}
	for _, h := range hold[1:] {
		s.putPointIter(h.it, h.w)
	}
	if got := len(s.points.slots); got != 0 {
		t.Fatalf("%d slots still taken after every iterator was given back", got)
	}
}
