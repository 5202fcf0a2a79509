package dedupe

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// TestSmallBatchArenaSized: a batch of one new record, the transaction of
// a command answered on its own, allocates less than one fixed-size key
// arena buffer in all: the arena is sized to the batch's keys, not
// keyArenaChunk (round 14 (latency): that buffer was a fifth of the bytes
// serve allocated per command, one at a time).
func TestSmallBatchArenaSized(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commit := func(i int) {
		b := s.NewBatchSize(1) // as the committer sizes its batch
		b.PutRecord(rec(fmt.Sprintf("key-%08d", i), "e1", schemas.StatusSucceeded, 0))
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 { // warm: Pebble's pools, the memtable's first arena
		commit(i)
	}
	const n = 200
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for i := range n {
		commit(1000 + i)
	}
	runtime.ReadMemStats(&m1)
	per := (m1.TotalAlloc - m0.TotalAlloc) / n
	t.Logf("%d bytes allocated per one-record batch", per)
	if per >= keyArenaChunk {
		t.Errorf("a one-record batch allocated %d bytes, at least one %d-byte key arena buffer", per, keyArenaChunk)
	}
}
