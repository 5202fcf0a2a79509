package dedupe

import (
	"path/filepath"
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
	c.del("k")
	_, _, v = c.lookup("k")
	c.putIfQuiet("k", 3, v)
	if got, ok := c.get("k"); !ok || got != 3 {
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
	s, err := Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
