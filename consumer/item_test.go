package consumer

import (
	"runtime"
	"testing"
	"unsafe"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// TestItemDoesNotPinFetchResponse: a buffered command must not keep the
// fetch response its record was decoded from. A fetched record's key and
// value are slices of the whole response (up to --max-fetch-bytes); an
// item that held the record kept every response with a buffered command
// live, megabytes of heap the collector then doubled (docs/memory.md).
func TestItemDoesNotPinFetchResponse(t *testing.T) {
	resp := make([]byte, 1<<20) // the response the record's bytes are slices of
	copy(resp, "entity-1{}")
	gone := weak.Make(&resp[0])
	it := newItem(&kgo.Record{Partition: 3, Offset: 42, Key: resp[:8], Value: resp[8:10]}, schemas.Command{Subject: "entity-1"})
	resp = nil
	runtime.GC()
	runtime.GC()
	if gone.Value() != nil {
		t.Fatal("the fetch response is still reachable from a buffered item")
	}
	if it.partition != 3 || it.offset != 42 || it.size != 10 || it.cmd.Subject != "entity-1" {
		t.Fatalf("item = partition %d offset %d size %d subject %q; want 3, 42, 10, entity-1", it.partition, it.offset, it.size, it.cmd.Subject)
	}
}

// TestTransactionBound: the committer takes at most 512 answers, or 4 MiB
// of them, into one transaction. Each transaction is held several times
// over while it commits (its records, the produce request they are encoded
// into, the Pebble batch), so its bound is a bound on the heap's peak
// (docs/memory.md).
func TestTransactionBound(t *testing.T) {
	c := &committer{}
	rec := schemas.Record{Data: make([]byte, 100)}
	for range 1300 {
		c.mu.queue = append(c.mu.queue, entry{item: &stagedItem{emits: []emit{{journal: &rec, outcome: &rec}}}})
	}
	for _, want := range []int{512, 512, 276, 0} {
		if got := len(c.take()); got != want {
			t.Fatalf("transaction of %d answers, want %d", got, want)
		}
	}
	big := schemas.Record{Data: make([]byte, 1<<20)} // ~2 MiB each, estimated
	for range 5 {
		c.mu.queue = append(c.mu.queue, entry{item: &stagedItem{emits: []emit{{journal: &big, outcome: &big}}}})
	}
	if got := len(c.take()); got != 1 {
		t.Fatalf("transaction of %d answers of ~2 MiB, want 1 (4 MiB bound)", got)
	}
}

// TestEntityQueueSize: an entity's queue is allocated for most commands
// of a backlog (one per entity with nothing queued), so it stays within
// the 64-byte size class; what only a change of ownership needs is kept
// beside it (pipeline.mu.later).
func TestEntityQueueSize(t *testing.T) {
	if n := unsafe.Sizeof(entityQueue{}); n > 64 {
		t.Fatalf("entityQueue is %d bytes, past the 64-byte size class", n)
	}
}
