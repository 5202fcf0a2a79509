package consumer

import (
	"runtime"
	"testing"
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
