// Package outbox stages everything one processing cycle must publish — journal
// records, outcome events, deadletters, forwarded commands — and writes it
// inside the Kafka transaction that also commits the consumed offsets.
//
// Why no separate relay reading a table: with KIP-447 transactions the outbox
// and the offset commit are one atomic write on the broker. "Store then
// publish" and "publish then store" both fail on their own (see watermill's
// forwarder doc); here the store *is* the publish, and Pebble is updated only
// after the transaction committed, as a cache of it. Outcome ids are
// deterministic (schemas.OutcomeID), so the rare republication after an
// aborted-then-retried cycle carries the same id and consumers can drop it.
package outbox

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// Kind says which topic an entry goes to.
type Kind int

const (
	KindJournal Kind = iota + 1
	KindOutcome
	KindDeadletter
	KindForward
)

// Entry is one staged record.
type Entry struct {
	Kind   Kind
	Record *kgo.Record
	// Journal is the execution record a KindJournal entry carries; the
	// executor applies it to Pebble once the transaction committed.
	Journal *schemas.Record
}

// Topics tells the batch where each kind goes. Partitions holds each
// topic's partition count: keyed records are placed with Kafka's default
// murmur2 mapping here, so the producer can use a manual partitioner and the
// journal can be written to exactly the command's partition.
//
// MaxRecordBytes is the largest RecordSize a record may have to be staged:
// the topics' max.message.bytes, which the producer's ProducerBatchMaxBytes
// must match or exceed; 0 means DefaultMaxMessageBytes. Sizes are known
// before a write, so one oversized item is answered too_large instead of
// aborting every transaction it is in.
type Topics struct {
	Journal, Outcomes, Deadletter, Commands string
	Partitions                              map[string]int
	MaxRecordBytes                          int
}

func (t Topics) place(r *kgo.Record) {
	n := t.Partitions[r.Topic]
	if n <= 0 || len(r.Key) == 0 {
		r.Partition = 0
		return
	}
	r.Partition = partitioner.ForKey(r.Key, n)
}

// Batch is the staged output of one cycle (or one intent write).
type Batch struct {
	topics  Topics
	entries []Entry
}

// NewBatch returns an empty batch for these topics.
func NewBatch(t Topics) *Batch { return &Batch{topics: t} }

// NewBatchSize is NewBatch with room for about entries entries (a hint),
// staged without growing the batch's list.
func NewBatchSize(t Topics, entries int) *Batch {
	return &Batch{topics: t, entries: make([]Entry, 0, entries)}
}

// Len is the number of staged entries (the outbox backlog of this cycle).
func (b *Batch) Len() int { return len(b.entries) }

// Entries returns the staged entries in publication order.
func (b *Batch) Entries() []Entry { return b.entries }

// Journal stages a state change of rec on journal partition p. The caller
// has already chained its hash; order of calls is journal order. A record
// over the limit is not staged: the error wraps ErrTooLarge.
func (b *Batch) Journal(p int32, rec schemas.Record) error {
	v, err := wire.MarshalRecord(rec)
	if err != nil {
		return fmt.Errorf("outbox: journal record %q: %w", rec.IdempotencyKey, err)
	}
	return b.JournalBytes(p, &rec, v)
}

// JournalBytes is Journal for a record already encoded (wire.SealRecord):
// v is the value as it is, so a record is serialised once.
func (b *Batch) JournalBytes(p int32, rec *schemas.Record, v []byte) error {
	return b.journalBytes(&journalMessage{}, p, rec, v)
}

// Messages is room for a new key's two Kafka records — its journal
// record and its outcome event — for a caller that stages many and reuses
// the room (JournalBytesIn, OutcomeEventIn) once a batch that used it was
// produced: franz-go keeps a record until its produce promise fires,
// which Produce waits for. The zero value is ready.
type Messages struct {
	journal journalMessage
	outcome wire.OutcomeMessage
}

// JournalBytesIn is JournalBytes with its Kafka record built in m.
func (b *Batch) JournalBytesIn(m *Messages, p int32, rec *schemas.Record, v []byte) error {
	return b.journalBytes(&m.journal, p, rec, v)
}

func (b *Batch) journalBytes(m *journalMessage, p int32, rec *schemas.Record, v []byte) error {
	m.key = append(m.key[:0], rec.IdempotencyKey...)
	m.r = kgo.Record{
		Topic:     b.topics.Journal,
		Partition: p,
		Key:       m.key[:len(m.key):len(m.key)],
		Value:     v,
	}
	m.h = [2]kgo.RecordHeader{
		{Key: schemas.HeaderKind, Value: kindRecord},
		{Key: schemas.HeaderEpoch, Value: strconv.AppendInt(m.epoch[:0:len(m.epoch)], rec.Epoch, 10)},
	}
	m.r.Headers = m.h[:]
	r := &m.r
	if err := b.topics.check("journal record", r); err != nil {
		return err
	}
	b.entries = append(b.entries, Entry{Kind: KindJournal, Record: r, Journal: rec})
	return nil
}

// journalMessage is a journal record's Kafka record with its two headers
// and the epoch header's digits: one heap object for all of them, as
// wire's outcome records are (every new key journals one).
type journalMessage struct {
	r     kgo.Record
	h     [2]kgo.RecordHeader
	epoch [20]byte // an int64's digits and sign
	key   []byte   // the record's key; its array is kept when m is reused
}

// kindRecord is the kind header's value of every journal record, shared:
// nothing writes into a header's value.
var kindRecord = []byte(schemas.KindRecord)

// Epoch stages an ownership-epoch marker on journal partition p. It names
// the partition count the owner works with, so that a restore after the
// topics were grown can tell that entities moved.
func (b *Batch) Epoch(p int32, epoch int64, executor string, partitions int) {
	r := &kgo.Record{
		Topic:     b.topics.Journal,
		Partition: p,
		Key:       []byte("onceflight.epoch"),
		Value:     wire.EncodeEpochMarker(wire.EpochMarker{Epoch: epoch, Executor: executor, Partitions: partitions}),
		Headers: []kgo.RecordHeader{
			{Key: schemas.HeaderKind, Value: []byte(schemas.KindEpoch)},
			{Key: schemas.HeaderEpoch, Value: []byte(strconv.FormatInt(epoch, 10))},
		},
	}
	b.entries = append(b.entries, Entry{Kind: KindJournal, Record: r})
}

// Seal stages a seal (trust.Seal's signed note) on journal partition p,
// after the records it covers.
func (b *Batch) Seal(p int32, epoch int64, note []byte) {
	r := &kgo.Record{
		Topic:     b.topics.Journal,
		Partition: p,
		Key:       []byte("onceflight.seal"),
		Value:     note,
		Headers: []kgo.RecordHeader{
			{Key: schemas.HeaderKind, Value: []byte(schemas.KindSeal)},
			{Key: schemas.HeaderEpoch, Value: []byte(strconv.FormatInt(epoch, 10))},
		},
	}
	b.entries = append(b.entries, Entry{Kind: KindJournal, Record: r})
}

// Outcome stages the outcome event answering command causationID with rec.
// An event over the limit is not staged: the error wraps ErrTooLarge.
func (b *Batch) Outcome(rec schemas.Record, causationID string, replayed bool) error {
	r, err := wire.EncodeOutcome(rec, causationID, replayed)
	if err != nil {
		return fmt.Errorf("outbox: outcome for %q: %w", rec.IdempotencyKey, err)
	}
	return b.outcome(r)
}

// OutcomeBytes is Outcome for a record already encoded: data becomes the
// event's data as it is.
func (b *Batch) OutcomeBytes(rec *schemas.Record, data []byte, causationID string, replayed bool) error {
	return b.outcome(wire.EncodeOutcomeData(rec, data, causationID, replayed))
}

// OutcomeEvent is Outcome for an event wire.SealOutcome wrote for rec.
func (b *Batch) OutcomeEvent(rec *schemas.Record, event []byte) error {
	return b.outcome(wire.OutcomeRecord(rec, event))
}

// OutcomeEventIn is OutcomeEvent with its Kafka record built in m.
func (b *Batch) OutcomeEventIn(m *Messages, rec *schemas.Record, event []byte) error {
	return b.outcome(wire.OutcomeRecordIn(&m.outcome, rec, event))
}

// outcome stages the outcome event r.
func (b *Batch) outcome(r *kgo.Record) error {
	r.Topic = b.topics.Outcomes
	if err := b.topics.check("outcome event", r); err != nil {
		return err
	}
	b.topics.place(r)
	b.entries = append(b.entries, Entry{Kind: KindOutcome, Record: r})
	return nil
}

// Deadletter stages the original bytes of an undecodable command. It never
// fails for size: when the copy (original plus the reason and source headers)
// would be over the limit, it stages wire.DeadletterReference instead, a
// record without the value (and if need be without the original headers and
// key) that names the source offset, where the bytes stay.
func (b *Batch) Deadletter(orig *kgo.Record, reason string) {
	var r *kgo.Record
	if deadletterSize(orig, reason) <= b.topics.Limit() {
		r = wire.DeadletterRecord(orig, reason)
	} else {
		r = wire.DeadletterReference(orig, reason, func(r *kgo.Record) bool {
			return RecordSize(r) <= b.topics.Limit()
		})
	}
	r.Topic = b.topics.Deadletter
	b.topics.place(r)
	b.entries = append(b.entries, Entry{Kind: KindDeadletter, Record: r})
}

// Forward stages a copy of a misrouted command for its entity's partition,
// recording where it first landed. A copy over the limit is not staged: the
// error wraps ErrTooLarge, and the caller deadletters the command (by
// reference, see Deadletter) and answers it too_large.
func (b *Batch) Forward(orig *kgo.Record, entity string, to int32) error {
	r, err := b.topics.ForwardCopy(orig, entity, to)
	if err != nil {
		return err
	}
	b.StageForward(r)
	return nil
}

// StageForward stages a copy ForwardCopy built (and so checked against
// the limit), for a caller that built it to decide how to answer.
func (b *Batch) StageForward(copy *kgo.Record) {
	b.entries = append(b.entries, Entry{Kind: KindForward, Record: copy})
}

// ForwardCopy is the copy Forward stages for a misrouted command, or an
// error wrapping ErrTooLarge when that copy would not fit the commands
// topic. The executor asks before it decides how to answer the command.
func (t Topics) ForwardCopy(orig *kgo.Record, entity string, to int32) (*kgo.Record, error) {
	hs := append([]kgo.RecordHeader(nil), orig.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: schemas.HeaderForwardedFromPartition, Value: []byte(strconv.Itoa(int(orig.Partition)))},
		kgo.RecordHeader{Key: schemas.HeaderForwardedFromOffset, Value: []byte(strconv.FormatInt(orig.Offset, 10))},
	)
	r := &kgo.Record{Topic: t.Commands, Partition: to, Key: []byte(entity), Value: orig.Value, Headers: hs}
	if err := t.check("forwarded command", r); err != nil {
		return nil, err
	}
	return r, nil
}

// deadletterSize is RecordSize(wire.DeadletterRecord(orig, reason))
// without copying the value.
func deadletterSize(orig *kgo.Record, reason string) int {
	r := kgo.Record{Key: orig.Key, Value: orig.Value}
	r.Headers = append(append([]kgo.RecordHeader(nil), orig.Headers...),
		kgo.RecordHeader{Key: schemas.HeaderDeadletterReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: schemas.HeaderSourceTopic, Value: []byte(orig.Topic)},
		kgo.RecordHeader{Key: schemas.HeaderSourcePartition, Value: []byte(strconv.FormatInt(int64(orig.Partition), 10))},
		kgo.RecordHeader{Key: schemas.HeaderSourceOffset, Value: []byte(strconv.FormatInt(orig.Offset, 10))},
	)
	return RecordSize(&r)
}

// Produce writes every entry through cl, which must be inside a transaction,
// and reports the last journal offset written per partition. Records are
// produced asynchronously and awaited together: one round trip per batch,
// not per record.
func (b *Batch) Produce(ctx context.Context, cl *kgo.Client) (map[int32]int64, error) {
	if len(b.entries) == 0 {
		return nil, nil
	}
	rs := make([]*kgo.Record, len(b.entries))
	for i, e := range b.entries {
		rs[i] = e.Record
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("outbox: produce %d records: %w", len(rs), err)
	}
	last := map[int32]int64{}
	for _, e := range b.entries {
		if e.Kind == KindJournal && e.Record.Offset >= last[e.Record.Partition] {
			last[e.Record.Partition] = e.Record.Offset
		}
	}
	return last, nil
}
