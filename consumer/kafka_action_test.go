package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaconn "github.com/onceflight/onceflight/internal/connectors/kafka"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// An action with the kafka connector, wired from the actions file: the
// effect is one record on the target topic, keyed by entity, carrying the
// idempotency key and fencing token; a repeat is answered from the record.
func TestKafkaAction(t *testing.T) {
	h := onceflighttest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(h.Client()).CreateTopic(ctx, 3, 1, nil, "shipping.replacements"); err != nil {
		t.Fatal(err)
	}
	h.UseConfig("actions:\n  shipping.replace:\n    connector: kafka\n    topic: shipping.replacements\n    timeout: 2s\n")
	h.Start(t.TempDir())
	h.SubmitAction("k1", "shipping.replace", "order-5", "replace-5", `{"sku":"A-1"}`)
	h.SubmitAction("k2", "shipping.replace", "order-5", "replace-5", `{"sku":"A-1"}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	if o := seen["k1"][0]; o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("first: %+v", o.Record)
	}
	if o := seen["k2"][0]; !o.Replayed {
		t.Fatalf("repeat not replayed: %+v", o)
	}

	// Both outcomes are out, so every effect record there will be is
	// written: read the topic to the end offsets the broker reports (a
	// fixed wait for a wrong second effect could end before it is read).
	ends, err := kadm.NewClient(h.Client()).ListEndOffsets(ctx, "shipping.replacements")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition], from[o.Partition] = o.Offset, kgo.NewOffset().AtStart()
		}
	})
	rd, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"shipping.replacements": from}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var effects []*kgo.Record
	for len(want) > 0 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("effect records not read to their end offsets %v", want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			effects = append(effects, r)
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	if len(effects) != 1 {
		t.Fatalf("%d effect records, want 1", len(effects))
	}
	r := effects[0]
	hdr := map[string]string{}
	for _, x := range r.Headers {
		hdr[x.Key] = string(x.Value)
	}
	if string(r.Key) != "order-5" || string(r.Value) != `{"sku":"A-1"}` || hdr[kafkaconn.HeaderKey] != "replace-5" || hdr[kafkaconn.HeaderFencingToken] == "" {
		t.Fatalf("effect record: key %q value %q headers %v", r.Key, r.Value, hdr)
	}
}
