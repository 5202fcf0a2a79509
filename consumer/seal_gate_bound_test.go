package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// With signed transactions required, a restore holds the records no seal
// covers yet until one does (they are applied only once trusted), and
// refused them only at the journal's end: a writer without a key could
// append any number of them, and every restore of the partition held them
// all in memory (the journal's size) before refusing. No executor's
// transaction writes more than maxFlushEntries entries (a few records
// each) or a few MiB before its seal, so a run longer than that is
// refused as it grows: the partition is held at once, as it would be at
// the end.
func TestRestoreRefusesAnUnsealedRunEarly(t *testing.T) {
	h := onceflighttest.New(t)
	a := newExecKey(t, "executor-a")
	keys := signing(a, trustedKeys(t, a.line))
	na := h.StartNode("a", t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: keys})
	h.Submit("c0", "order-0", "k0", `{}`)
	h.Outcomes(1, map[string][]schemas.Outcome{}, nil)
	if err := na.Stop(); err != nil {
		t.Fatal(err)
	}

	// A writer without a key appends 6 000 records to the partition.
	p := partitioner.ForEntity("order-0", onceflighttest.Partitions)
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 6000
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: "onceflight.journal", Partition: p, Key: []byte(fmt.Sprintf("junk-%d", i)), Value: []byte(`{}`),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	nb := h.StartNode("b", t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: keys})
	heldOnly(t, nb, p, "records in a row without a seal")
}
