package outbox

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

func TestPlacement(t *testing.T) {
	b := NewBatch(Topics{Journal: "j", Outcomes: "o", Deadletter: "d", Commands: "c",
		Partitions: map[string]int{"j": 12, "o": 7, "d": 1, "c": 12}})
	now := time.Now()
	rec := schemas.Record{IdempotencyKey: "k1", Entity: "order-1042", Status: schemas.StatusSucceeded, FinishedAt: &now,
		Command: schemas.CommandRef{ID: "c1", Partition: 5}}
	if err := b.Journal(5, rec); err != nil {
		t.Fatal(err)
	}
	if err := b.Outcome(rec, "c1", false); err != nil {
		t.Fatal(err)
	}
	orig := &kgo.Record{Topic: "c", Partition: 3, Offset: 99, Key: []byte("order-1042"), Value: []byte("x"),
		Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("c9")}}}
	if err := b.Forward(orig, "order-1042", 8); err != nil {
		t.Fatal(err)
	}
	b.Deadletter(orig, "not a CloudEvent")
	es := b.Entries()
	if len(es) != 4 || b.Len() != 4 {
		t.Fatalf("entries: %d", len(es))
	}
	// The journal goes to the command's partition, keyed by the key.
	if j := es[0].Record; j.Topic != "j" || j.Partition != 5 || string(j.Key) != "k1" || es[0].Journal == nil {
		t.Fatalf("journal: %+v", j)
	}
	// Outcomes are keyed by entity and placed by murmur2 on their topic.
	if o := es[1].Record; o.Topic != "o" || string(o.Key) != "order-1042" || o.Partition != partitioner.ForEntity("order-1042", 7) {
		t.Fatalf("outcome: topic %s key %s partition %d", o.Topic, o.Key, o.Partition)
	}
	// A forward keeps the original bytes and headers, and says where it came from.
	f := es[2].Record
	hdr := map[string]string{}
	for _, h := range f.Headers {
		hdr[h.Key] = string(h.Value)
	}
	if f.Topic != "c" || f.Partition != 8 || string(f.Value) != "x" || hdr["ce_id"] != "c9" ||
		hdr["onceflight-forwarded-from-partition"] != "3" || hdr["onceflight-forwarded-from-offset"] != "99" {
		t.Fatalf("forward: %+v", f)
	}
	if d := es[3].Record; d.Topic != "d" || d.Partition != 0 || string(d.Value) != "x" {
		t.Fatalf("deadletter: %+v", d)
	}
}

// TestJournalBytesHeaders: a journal record carries its kind and epoch
// headers (the epoch's digits of any int64), its key and value as given,
// in one object with its headers and the key's copy: every new key
// journals one.
func TestJournalBytesHeaders(t *testing.T) {
	b := NewBatch(Topics{Journal: "j", Outcomes: "o"})
	for _, epoch := range []int64{0, 7, -12, math.MaxInt64, math.MinInt64} {
		rec := schemas.Record{IdempotencyKey: "k1", Epoch: epoch}
		v := []byte(`{"x":1}`)
		if err := b.JournalBytes(3, &rec, v); err != nil {
			t.Fatal(err)
		}
		r := b.Entries()[b.Len()-1].Record
		if r.Topic != "j" || r.Partition != 3 || string(r.Key) != "k1" || &r.Value[0] != &v[0] || len(r.Headers) != 2 ||
			r.Headers[0].Key != schemas.HeaderKind || string(r.Headers[0].Value) != schemas.KindRecord ||
			r.Headers[1].Key != schemas.HeaderEpoch || string(r.Headers[1].Value) != strconv.FormatInt(epoch, 10) {
			t.Fatalf("epoch %d: %+v", epoch, r)
		}
	}
	rec := schemas.Record{IdempotencyKey: "k1", Epoch: 12345}
	v := []byte(`{}`)
	if n := testing.AllocsPerRun(50, func() { b.entries = b.entries[:0]; _ = b.JournalBytes(3, &rec, v) }); n > 2 {
		t.Errorf("JournalBytes: %.0f allocations, want 2 (the record with its headers, the key)", n)
	}
}
