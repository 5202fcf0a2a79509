package consumer_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

func TestRepeatReuseUnknownAndDeadletter(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())

	h.Submit("c1", "order-1", "k1", `{"amount":5}`)
	h.Submit("c2", "order-1", "k1", `{"amount":5}`) // repeat
	h.Submit("c3", "order-1", "k1", `{"amount":6}`) // reused with other data
	c := schemas.Command{ID: "c4", Source: "test", Type: "no.such", Subject: "order-2", IdempotencyKey: "k4"}
	r, _ := schemas.EncodeCommand(c, schemas.Structured)
	r.Topic = "onceflight.commands"
	h.Produce(r)
	h.Produce(&kgo.Record{Topic: "onceflight.commands", Value: []byte("not a cloudevent")})

	seen := map[string][]schemas.Outcome{}
	var dead []*kgo.Record
	h.Outcomes(4, seen, &dead)

	first, repeat, reused, unknown := seen["c1"][0], seen["c2"][0], seen["c3"][0], seen["c4"][0]
	if first.Record.Status != schemas.StatusSucceeded || first.Replayed {
		t.Fatalf("first: %+v", first)
	}
	if !repeat.Replayed || repeat.Record.Hash != first.Record.Hash || string(repeat.Record.Result) != string(first.Record.Result) {
		t.Fatalf("repeat not the recorded result: %+v vs %+v", repeat.Record, first.Record)
	}
	if reused.Record.Status != schemas.StatusRejected || reused.Record.Error.Code != schemas.CodeKeyReused {
		t.Fatalf("reused: %+v", reused.Record)
	}
	if unknown.Record.Error == nil || unknown.Record.Error.Code != schemas.CodeUnknownAction {
		t.Fatalf("unknown: %+v", unknown.Record)
	}
	if n := h.EffectCount()["k1"]; n != 1 {
		t.Fatalf("k1 executed %d times", n)
	}
	// Deadletter arrives in the same transaction as the outcomes.
	deadletters(t, h, seen, &dead, 1)
	var reason string
	for _, hd := range dead[0].Headers {
		if hd.Key == "onceflight-deadletter-reason" {
			reason = string(hd.Value)
		}
	}
	if string(dead[0].Value) != "not a cloudevent" || reason == "" {
		t.Fatalf("deadletter: %q reason %q", dead[0].Value, reason)
	}
	if id := repeat.ID; id == first.ID {
		t.Fatalf("replay must have its own outcome id (causation differs)")
	}
}

func TestDataDirLossRestoresFromJournal(t *testing.T) {
	h := onceflighttest.New(t)
	dir1 := t.TempDir()
	h.Start(dir1)
	for i := range 20 {
		h.Submit(fmt.Sprintf("a%d", i), fmt.Sprintf("e-%d", i%7), fmt.Sprintf("key-%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(20, seen, nil)
	h.Stop()
	if err := os.RemoveAll(dir1); err != nil {
		t.Fatal(err)
	}

	h.Start(t.TempDir()) // empty data dir: everything comes from the journal
	for i := range 20 {
		h.Submit(fmt.Sprintf("b%d", i), fmt.Sprintf("e-%d", i%7), fmt.Sprintf("key-%d", i), `{}`)
	}
	h.Outcomes(40, seen, nil)
	for i := range 20 {
		o := seen[fmt.Sprintf("b%d", i)]
		orig := seen[fmt.Sprintf("a%d", i)]
		if len(o) != 1 || !o[0].Replayed || o[0].Record.Hash != orig[0].Record.Hash {
			t.Fatalf("key-%d after data loss: %+v", i, o)
		}
	}
	for k, n := range h.EffectCount() {
		if n != 1 {
			t.Fatalf("%s executed %d times", k, n)
		}
	}
	if !strings.HasPrefix(seen["a0"][0].Record.Hash, "sha256:") {
		t.Fatalf("hash: %q", seen["a0"][0].Record.Hash)
	}
}
