package outbox

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
)

// DefaultMaxMessageBytes is the max.message.bytes onceflight's topics are
// meant to be created with, and the record limit of a batch whose Topics
// leave MaxRecordBytes at 0. The producer's kgo.ProducerBatchMaxBytes must
// be at least the same number, or kgo fails records this package let through.
//
// 4 MiB: a journal record or outcome event carries a command's data once
// (at most schemas.DefaultMaxDataBytes, 512 KiB, raw JSON copied verbatim
// now that nothing is HTML-escaped), a connector result (the HTTP connector
// caps bodies at 64 KiB; stored as a JSON string even control characters
// escaped six-fold stay under 400 KiB), an error message and a few hundred
// bytes of fields and CloudEvents attributes. That is under 1 MiB in the
// worst case; 4 MiB leaves a 4× margin, and lets a command a little over the
// data limit be deadlettered as a full copy rather than by reference. It is
// well under brokers' request and replica-fetch limits.
const DefaultMaxMessageBytes = 4 << 20

// ErrTooLarge is wrapped by every error about a record that would exceed its
// topic's limit. Such an item is answered schemas.CodeTooLarge (or
// deadlettered by reference) instead: retrying it would fail the same way.
var ErrTooLarge = errors.New("record too large")

// Upper bounds of the v2 record batch framing that RecordSize counts.
const (
	// batchFraming is a one-record batch's fixed part: the 61-byte v2
	// header (base offset 8, batch length 4, leader epoch 4, magic 1, crc 4,
	// attributes 2, last offset delta 4, first and max timestamps 16,
	// producer id 8, producer epoch 2, base sequence 4, record count 4),
	// plus the produce request's length prefix of the records (4 bytes
	// non-flexible, at most 5 as a flexible uvarint). kgo counts the same,
	// against ProducerBatchMaxBytes; a broker counts the header alone.
	batchFraming = 61 + 5
	// recordFraming bounds a record's own fixed part: its length varint (at
	// most 5 bytes), attributes 1, timestamp delta (varlong, at most 10) and
	// offset delta (varint, at most 5), whatever its place in a batch.
	recordFraming = 5 + 1 + 10 + 5
)

// RecordSize is an upper bound of r's encoded size as the only record of an
// uncompressed v2 record batch, framing included: what a producer and a
// broker compare with max.message.bytes. A record with RecordSize(r) <= the
// topic's max.message.bytes (and the producer's ProducerBatchMaxBytes) can
// always be written: batches are cut before a record that would not fit, and
// compression only shrinks them. Topic and partition are not counted.
func RecordSize(r *kgo.Record) int {
	n := batchFraming + recordFraming +
		varintLen(len(r.Key)) + len(r.Key) +
		varintLen(len(r.Value)) + len(r.Value) +
		varintLen(len(r.Headers))
	for _, h := range r.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return n
}

// varintLen is the length of n as a zigzag varint, as Kafka writes lengths.
// A nil key or value is written as -1, one byte, like length 0.
func varintLen(n int) int {
	u := uint64(n) << 1 // zigzag of a non-negative n
	l := 1
	for u >= 0x80 {
		u >>= 7
		l++
	}
	return l
}

// Limit is the largest RecordSize a batch for these topics stages:
// MaxRecordBytes, or DefaultMaxMessageBytes when that is 0. Configure the
// producer with kgo.ProducerBatchMaxBytes(int32(t.Limit())) or more, and the
// topics with max.message.bytes of at least this.
func (t Topics) Limit() int {
	if t.MaxRecordBytes > 0 {
		return t.MaxRecordBytes
	}
	return DefaultMaxMessageBytes
}

// check returns an error wrapping ErrTooLarge when r is over the limit.
func (t Topics) check(what string, r *kgo.Record) error {
	if n, max := RecordSize(r), t.Limit(); n > max {
		return fmt.Errorf("outbox: %s for topic %q key %q is %d bytes, over the %d-byte limit: %w",
			what, r.Topic, wire.CapMessage(string(r.Key), 128), n, max, ErrTooLarge)
	}
	return nil
}
