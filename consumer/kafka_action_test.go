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
	const parts = 3 // of the effect topic
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(h.Client()).CreateTopic(ctx, parts, 1, nil, "shipping.replacements"); err != nil {
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
	// written: read the topic to its end offsets (a fixed wait for a wrong
	// second effect could end before it is read).
	var effects []*kgo.Record
	for p := range int32(parts) {
		effects = append(effects, h.ReadAll("shipping.replacements", p)...)
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
