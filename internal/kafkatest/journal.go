package kafkatest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// AppendChained writes rec to partition p of the journal topic as a
// writer outside any executor would: chained after the last record of
// journal (that partition's records, oldest first) with its epoch and
// executor, and sealed the way the executor seals. The hash chain alone
// cannot tell such a record from the executor's; only signatures can,
// which is what the tests that forge with it check.
func AppendChained(t testing.TB, brokers []string, topic string, p int32, journal []*kgo.Record, rec schemas.Record) {
	t.Helper()
	var last schemas.Record
	for _, r := range journal {
		if wire.JournalKind(r) != schemas.KindRecord {
			continue
		}
		var err error
		if last, err = schemas.UnmarshalRecord(r.Value); err != nil {
			t.Fatal(err)
		}
	}
	if last.Hash == "" {
		t.Fatalf("journal partition %d has no record to chain after", p)
	}
	rec.Epoch, rec.Executor, rec.PrevHash = last.Epoch, last.Executor, last.Hash
	v, err := wire.SealRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(rec.IdempotencyKey), Value: v, Headers: []kgo.RecordHeader{
		{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)},
		{Key: schemas.HeaderEpoch, Value: []byte(strconv.FormatInt(rec.Epoch, 10))},
	}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
