package dedupe

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// A value read before a write must not be cached over the write.
func TestGenCacheReadOvertakenByWrite(t *testing.T) {
	c := newGenCache[int](4)
	_, _, v := c.lookup("k")
	c.put("k", 2)           // a commit lands while a reader reads Pebble
	c.putIfQuiet("k", 1, v) // the reader's older value
	if got, _ := c.get("k"); got != 2 {
		t.Fatalf("cached %d, want the committed 2", got)
	}
	_, _, v = c.lookup("q")
	c.putIfQuiet("q", 3, v)
	if got, ok := c.get("q"); !ok || got != 3 {
		t.Fatalf("quiet read not cached: %d %v", got, ok)
	}
	// Bounded: two generations of at most max entries.
	for i := range 100 {
		c.put(string(rune('a'+i)), i)
	}
	if n := len(c.cur) + len(c.old); n > 8 {
		t.Fatalf("%d entries, bound 8", n)
	}
}

// "No such entity" is remembered, and forgotten by the first write.
func TestEntityNegativeCacheSeesCommit(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "db"))
	if _, found, err := s.Entity("e1"); found || err != nil {
		t.Fatalf("found %v, %v", found, err)
	}
	b := s.NewBatch()
	b.PutRecord(schemas.Record{IdempotencyKey: "k1", Entity: "e1", Status: schemas.StatusSucceeded, EntityVersion: 1})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	es, found, err := s.Entity("e1")
	if !found || err != nil || es.Version != 1 || es.LastKey != "k1" {
		t.Fatalf("after commit: %+v %v %v", es, found, err)
	}
}

// TestEntityReadOvertakenByCommit: a reader has read "no such entity"
// from Pebble and, before it caches that, the entity's first record
// commits on another goroutine. The reader's answer is its own, but it
// must not be cached: the next read sees the commit.
func TestEntityReadOvertakenByCommit(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "db"))
	read, resume := make(chan struct{}), make(chan struct{})
	s.entityReadHook = func(string) {
		close(read)
		<-resume
	}
	done := make(chan bool)
	go func() {
		_, found, err := s.Entity("e1")
		if err != nil {
			t.Error(err)
		}
		done <- found
	}()
	<-read
	s.entityReadHook = nil // the reads below are not paused
	b := s.NewBatch()
	b.PutRecord(schemas.Record{IdempotencyKey: "k1", Entity: "e1", Status: schemas.StatusSucceeded, EntityVersion: 1})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if <-done {
		t.Fatal("the paused read saw the commit; the test did not pause it before")
	}
	if es, found, err := s.Entity("e1"); err != nil || !found || es.Version != 1 {
		t.Fatalf("after the commit: %+v found=%v err=%v: the overtaken read's \"not found\" was cached", es, found, err)
	}
}

// TestEntityCacheConcurrentReadersAndCommits: readers race commits of the
// same entities, most of them reading "no such entity" just as the
// entity's first record commits. Whatever they cached, a read that starts
// after a commit returned must see that commit: a negative (or older)
// entry inserted by a reader the commit overtook would answer a later
// command with a state Pebble no longer has.
func TestEntityCacheConcurrentReadersAndCommits(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "db"))
	const entities, readers = 300, 4
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := r; ; i = (i + 7) % entities {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := s.Entity(fmt.Sprint("e", i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for round := int64(1); round <= 3; round++ {
		for i := range entities {
			ent := fmt.Sprint("e", i)
			b := s.NewBatch()
			b.PutRecord(schemas.Record{IdempotencyKey: fmt.Sprint("k", round), Entity: ent, Status: schemas.StatusSucceeded, EntityVersion: round})
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			// This entity just now, and the one before (readers have
			// had a commit's time to cache over it).
			for _, e := range []string{ent, fmt.Sprint("e", max(i-1, 0))} {
				es, found, err := s.Entity(e)
				if err != nil || !found || es.Version != round {
					close(stop)
					wg.Wait()
					t.Fatalf("round %d %s after its commit: %+v found=%v err=%v", round, e, es, found, err)
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	for i := range entities {
		if es, found, err := s.Entity(fmt.Sprint("e", i)); err != nil || !found || es.Version != 3 {
			t.Fatalf("e%d at the end: %+v found=%v err=%v", i, es, found, err)
		}
	}
}

// TestMetasKeepOnlyRecordsNotFinal: an intent's index fields stay cached
// for its final record; the final record drops them (a backlog of new keys
// then caches nothing), and a later rewrite of the final record, read from
// Pebble, still moves its index entries.
func TestMetasKeepOnlyRecordsNotFinal(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := scope("e-1", "k-1")
	put(t, s, rec("k-1", "e-1", schemas.StatusInProgress, 2))
	if m, ok := s.metas.get(key); !ok || m.status != schemas.StatusInProgress {
		t.Fatalf("after the intent: cached %+v, %v; want its in_progress fields", m, ok)
	}
	put(t, s, rec("k-1", "e-1", schemas.StatusUnresolved, 2))
	if m, ok := s.metas.get(key); ok {
		t.Fatalf("after the final record: still cached %+v", m)
	}
	put(t, s, rec("k-1", "e-1", schemas.StatusFailed, 3))
	idx := dump(t, s)
	for _, gone := range []string{statusPrefix(schemas.StatusInProgress) + key, statusPrefix(schemas.StatusUnresolved) + key} {
		if _, ok := idx[gone]; ok {
			t.Errorf("index entry %q left behind by a rewrite of an uncached record", gone)
		}
	}
	if _, ok := idx[statusPrefix(schemas.StatusFailed)+key]; !ok {
		t.Errorf("no index entry %q after the rewrite", statusPrefix(schemas.StatusFailed)+key)
	}
	if _, ok := s.metas.get(scope("e-1", "k-1")); ok {
		t.Error("final record cached after its rewrite")
	}
}

// TestEntityReadSeesCommitThroughReusedIterator: Entity reads Pebble
// through the pooled point iterators. A state read after a commit
// returned, with the cache not holding it (evicted), must be the
// commit's, not what an iterator made before the commit held.
func TestEntityReadSeesCommitThroughReusedIterator(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "db"))
	for v := int64(1); v <= 3; v++ {
		// Warm the pool: an iterator made now, put back for reuse.
		if _, _, err := s.Entity("other"); err != nil {
			t.Fatal(err)
		}
		b := s.NewBatch()
		b.PutRecord(schemas.Record{IdempotencyKey: fmt.Sprint("k", v), Entity: "e1", Status: schemas.StatusSucceeded, EntityVersion: v})
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		// As if evicted: the read goes to Pebble.
		s.entities = newGenCache[entityEntry](s.entities.max)
		if es, found, err := s.Entity("e1"); err != nil || !found || es.Version != v {
			t.Fatalf("after commit %d: %+v found=%v err=%v", v, es, found, err)
		}
	}
}
