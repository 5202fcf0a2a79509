package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

func sizeTopics(limit int) Topics {
	return Topics{Journal: "j", Outcomes: "o", Deadletter: "d", Commands: "c",
		Partitions: map[string]int{"j": 12, "o": 12, "d": 1, "c": 12}, MaxRecordBytes: limit}
}

func sizeRecord(data json.RawMessage) schemas.Record {
	now := time.Date(2025, 3, 1, 12, 0, 2, 0, time.UTC)
	return schemas.Record{IdempotencyKey: "k1", Entity: "order-1042", Action: "payments.refund",
		Status: schemas.StatusSucceeded, FinishedAt: &now, Data: data,
		Command: schemas.CommandRef{ID: "c1", Source: "urn:x", Partition: 5, Offset: 7}}
}

func headerMap(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// 200 KB of HTML-heavy data stays about 200 KB in the journal and the
// outcome: json.Marshal would have written each '<', '>', '&' as six bytes.
func TestHTMLDataIsNotInflated(t *testing.T) {
	html := strings.Repeat(`<a href=\"x\">&amp;</a>`, 200_000/len(`<a href=\"x\">&amp;</a>`))
	data := json.RawMessage(`{"html":"` + html + `"}`)
	b := NewBatch(sizeTopics(0))
	rec := sizeRecord(data)
	if err := b.Journal(5, rec); err != nil {
		t.Fatal(err)
	}
	if err := b.Outcome(rec, "c1", false); err != nil {
		t.Fatal(err)
	}
	for _, e := range b.Entries() {
		if n := len(e.Record.Value); float64(n) > 1.05*float64(len(data)) {
			t.Fatalf("%s value is %d bytes for %d bytes of data", e.Record.Topic, n, len(data))
		}
	}
	back, err := schemas.UnmarshalRecord(b.Entries()[0].Record.Value)
	if err != nil || !bytes.Equal(back.Data, data) {
		t.Fatalf("data changed: %v", err)
	}
}

func TestJournalAndOutcomeTooLarge(t *testing.T) {
	const limit = 4096
	b := NewBatch(sizeTopics(limit))
	rec := sizeRecord(json.RawMessage(`"` + strings.Repeat("x", limit) + `"`))
	err := b.Journal(5, rec)
	if !errors.Is(err, ErrTooLarge) || b.Len() != 0 {
		t.Fatalf("journal: err %v, %d staged", err, b.Len())
	}
	for _, want := range []string{`"j"`, `"k1"`, "4096-byte limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
	if err := b.Outcome(rec, "c1", false); !errors.Is(err, ErrTooLarge) || b.Len() != 0 {
		t.Fatalf("outcome: err %v, %d staged", err, b.Len())
	}
	// The same record with smaller data fits, right up to the limit.
	rec.Data = json.RawMessage(`"` + strings.Repeat("x", limit/2) + `"`)
	if err := b.Journal(5, rec); err != nil {
		t.Fatal(err)
	}
	if n := RecordSize(b.Entries()[0].Record); n > limit {
		t.Fatalf("staged %d bytes over %d", n, limit)
	}
	// The default applies when MaxRecordBytes is 0.
	if got := (Topics{}).Limit(); got != DefaultMaxMessageBytes {
		t.Fatalf("default limit %d", got)
	}
}

func TestDeadletterByReference(t *testing.T) {
	const limit = 64 << 10
	b := NewBatch(sizeTopics(limit))
	orig := &kgo.Record{Topic: "c", Partition: 3, Offset: 99, Key: []byte("order-1042"),
		Value:   bytes.Repeat([]byte{0xff}, limit),
		Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("c9")}}}
	b.Deadletter(orig, "data too large")
	d := b.Entries()[0].Record
	h := headerMap(d)
	if d.Value != nil || string(d.Key) != "order-1042" || h["ce_id"] != "c9" ||
		h[schemas.HeaderDeadletterOmitted] != "value" || h[schemas.HeaderDeadletterValueBytes] != strconv.Itoa(limit) ||
		h[schemas.HeaderDeadletterReason] != "data too large" || h[schemas.HeaderSourceTopic] != "c" ||
		h[schemas.HeaderSourcePartition] != "3" || h[schemas.HeaderSourceOffset] != "99" || d.Topic != "d" {
		t.Fatalf("by reference: key %q value %d bytes headers %v", d.Key, len(d.Value), h)
	}
	if RecordSize(d) > limit {
		t.Fatalf("reference is %d bytes", RecordSize(d))
	}

	// Huge headers and key are dropped too; the reference still fits.
	orig.Key = bytes.Repeat([]byte("k"), limit)
	orig.Headers = append(orig.Headers, kgo.RecordHeader{Key: "ce_big", Value: bytes.Repeat([]byte("h"), limit)})
	b.Deadletter(orig, strings.Repeat("r", 10*limit))
	d = b.Entries()[1].Record
	if h := headerMap(d); d.Value != nil || d.Key != nil || h["ce_id"] != "" || h[schemas.HeaderDeadletterOmitted] != "value,headers,key" ||
		h[schemas.HeaderSourceOffset] != "99" || RecordSize(d) > limit {
		t.Fatalf("by reference without key: %d bytes, headers %d", RecordSize(d), len(d.Headers))
	}

	// A copy that fits exactly is a full copy; one byte more is a reference.
	orig = &kgo.Record{Topic: "c", Partition: 3, Offset: 99, Key: []byte("order-1042")}
	full := func() *kgo.Record { return wire.DeadletterRecord(orig, "bad") }
	orig.Value = make([]byte, limit-RecordSize(full())-4) // -4: the value's length varint grows
	for RecordSize(full()) < limit {
		orig.Value = append(orig.Value, 0)
	}
	if RecordSize(full()) != limit || deadletterSize(orig, "bad") != limit {
		t.Fatalf("setup: %d, %d", RecordSize(full()), deadletterSize(orig, "bad"))
	}
	b.Deadletter(orig, "bad")
	if d := b.Entries()[2].Record; len(d.Value) != len(orig.Value) {
		t.Fatalf("a fitting copy was not copied: %d bytes", len(d.Value))
	}
	orig.Value = append(orig.Value, 0)
	b.Deadletter(orig, "bad")
	if d := b.Entries()[3].Record; d.Value != nil || headerMap(d)[schemas.HeaderDeadletterOmitted] != "value" {
		t.Fatalf("an over-limit copy was copied: %d bytes", len(d.Value))
	}
}

func TestForwardTooLarge(t *testing.T) {
	const limit = 64 << 10
	b := NewBatch(sizeTopics(limit))
	orig := &kgo.Record{Topic: "c", Partition: 3, Offset: 99, Key: []byte("order-1042"),
		Value: bytes.Repeat([]byte("v"), limit-200)}
	// The copy gains two headers; a command that fit its topic may not.
	for RecordSize(orig) <= limit-20 {
		orig.Headers = append(orig.Headers, kgo.RecordHeader{Key: "ce_x", Value: []byte("y")})
	}
	if RecordSize(orig) > limit {
		t.Fatal("setup: the original does not fit")
	}
	err := b.Forward(orig, "order-1042", 8)
	if !errors.Is(err, ErrTooLarge) || b.Len() != 0 {
		t.Fatalf("forward: err %v, %d staged", err, b.Len())
	}
	// What the caller does instead.
	b.Deadletter(orig, err.Error())
	if d := b.Entries()[0].Record; RecordSize(d) > limit || headerMap(d)[schemas.HeaderDeadletterOmitted] != "value" {
		t.Fatalf("deadletter: %d bytes, headers %v", RecordSize(d), headerMap(d))
	}
}

// sampleRecords covers varint boundaries of every length, many headers, nil
// and empty fields, and the records the batch itself builds.
func sampleRecords(t *testing.T) []*kgo.Record {
	t.Helper()
	var rs []*kgo.Record
	for _, n := range []int{0, 1, 63, 64, 65, 8191, 8192, 8193, 1 << 20, 1<<20 + 3} {
		rs = append(rs,
			&kgo.Record{Key: bytes.Repeat([]byte("k"), n%9000), Value: bytes.Repeat([]byte("v"), n)},
			&kgo.Record{Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: strings.Repeat("h", n%9000), Value: bytes.Repeat([]byte("x"), n)}}},
		)
	}
	rs = append(rs, &kgo.Record{}, &kgo.Record{Key: []byte{}, Value: []byte{}})
	many := &kgo.Record{Key: []byte("k"), Value: []byte("v")}
	for i := range 300 {
		many.Headers = append(many.Headers, kgo.RecordHeader{Key: "h" + strconv.Itoa(i), Value: []byte(strconv.Itoa(i))})
	}
	rs = append(rs, many)
	b := NewBatch(sizeTopics(0))
	rec := sizeRecord(json.RawMessage(`{"a":"<b>"}`))
	if err := b.Journal(5, rec); err != nil {
		t.Fatal(err)
	}
	if err := b.Outcome(rec, "c1", true); err != nil {
		t.Fatal(err)
	}
	b.Epoch(5, 17, "onceflight-0", 3)
	orig := &kgo.Record{Topic: "c", Partition: 3, Offset: 99, Key: []byte("order-1042"), Value: []byte("x"),
		Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("c9")}}}
	b.Deadletter(orig, "not a CloudEvent")
	if err := b.Forward(orig, "order-1042", 8); err != nil {
		t.Fatal(err)
	}
	for _, e := range b.Entries() {
		rs = append(rs, e.Record)
	}
	return rs
}

// v2Size is r's exact size as the only record of a v2 batch, with the worst
// case timestamp and offset deltas, plus the produce request's 4-byte
// length prefix of the records (what kgo counts).
func v2Size(r *kgo.Record, tsDelta int64, offsetDelta int32) int {
	kr := kmsg.Record{TimestampDelta64: tsDelta, OffsetDelta: offsetDelta, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
	}
	body := kr.AppendTo(nil) // with Length 0, a one-byte varint
	kr.Length = int32(len(body) - 1)
	batch := kmsg.RecordBatch{Magic: 2, NumRecords: 1, Records: kr.AppendTo(nil)}
	return 4 + len(batch.AppendTo(nil))
}

func TestRecordSizeIsAnUpperBound(t *testing.T) {
	for i, r := range sampleRecords(t) {
		got := RecordSize(r)
		worst := v2Size(r, math.MinInt64, math.MaxInt32)
		best := v2Size(r, 0, 0)
		if got < worst+1 { // +1: a flexible produce request's prefix may be a 5-byte uvarint
			t.Fatalf("record %d: RecordSize %d, worst-case encoding %d", i, got, worst)
		}
		if got-best > 24 {
			t.Fatalf("record %d: RecordSize %d overestimates %d by %d", i, got, best, got-best)
		}
	}
}

// A record of RecordSize(r) bytes is accepted by kgo's own accounting and a
// broker's max.message.bytes when both are set to exactly that size.
func TestRecordSizeFitsKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var rs []*kgo.Record
	limits := map[string]int32{}
	for _, r := range sampleRecords(t) {
		r = &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers}
		for RecordSize(r) < 512 { // kgo's smallest ProducerBatchMaxBytes
			r.Value = append(r.Value, 'p')
		}
		r.Topic = fmt.Sprintf("t%d", len(rs))
		limits[r.Topic] = int32(RecordSize(r))
		rs = append(rs, r)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			if n, ok := limits[topic]; ok {
				return n
			}
			return 1 << 20
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	for _, r := range rs {
		v := strconv.Itoa(int(limits[r.Topic]))
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, r.Topic); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rs {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("%s (RecordSize %d): %v", r.Topic, limits[r.Topic], err)
		}
	}
	// And the broker does enforce the limit: one byte over it is refused.
	over := &kgo.Record{Topic: rs[0].Topic, Value: append(bytes.Repeat([]byte("v"), int(limits[rs[0].Topic])), 'x')}
	raw, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.ProduceSync(ctx, over).FirstErr(); err == nil {
		t.Fatal("broker accepted a record over max.message.bytes")
	}
}
