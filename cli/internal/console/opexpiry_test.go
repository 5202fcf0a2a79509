package console

import (
	"cmp"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestConsoleDecisionCarriesNotAfter: the console's decision is signed
// with a not_after ValidFor (default schemas.DecisionValidity) from when
// it is sent, and the executor applies it.
func TestConsoleDecisionCarriesNotAfter(t *testing.T) {
	h := onceflighttest.New(t)
	keys, pub := h.StartVerifier("ops-1")
	h.Submit("c1", "order-1", "k1", `{"amount":5}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	oc, err := client.New(client.WithBrokers(h.Brokers...), client.WithControlKeys(keys))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(oc.Close)
	release, _ := kindNamed("release")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := map[string]time.Duration{}
	for _, validFor := range []time.Duration{0, 10 * time.Minute} {
		d, err := ClientDecider{C: oc, ValidFor: validFor}.Send(ctx, Execution{Entity: "order-1", Key: "k1", Status: schemas.StatusSucceeded}, release, "redo", "alice")
		if err != nil {
			t.Fatal(err)
		}
		sent[d.ID] = cmp.Or(validFor, schemas.DecisionValidity)
	}
	h.Outcomes(3, seen, nil)
	found := 0
	for p := range int32(onceflighttest.Partitions) {
		for _, r := range h.ReadAll("onceflight.commands", p) {
			c, err := schemas.DecodeCommand(r, schemas.DefaultMaxDataBytes)
			if err != nil || c.Type != schemas.TypeRelease {
				continue
			}
			validFor, ok := sent[c.ID]
			if !ok {
				t.Fatalf("a release the test did not send: %+v", c)
			}
			found++
			var d schemas.Decision
			if err := json.Unmarshal(c.Data, &d); err != nil {
				t.Fatal(err)
			}
			if left := time.Until(d.NotAfter); left > validFor || left < validFor-time.Minute {
				t.Fatalf("release valid for %s: not_after %s is %s away", validFor, d.NotAfter, left)
			}
			if err := pub.VerifyControl(&c); err != nil {
				t.Fatalf("release signature: %v", err)
			}
		}
	}
	if found != 2 {
		t.Fatalf("found %d of the 2 releases on the commands topic", found)
	}
	// The first release applies; the second finds k1 released already.
	var statuses []schemas.Status
	for id := range sent {
		statuses = append(statuses, seen[id][0].Record.Status)
	}
	if len(statuses) != 2 || (statuses[0] == schemas.StatusSucceeded) == (statuses[1] == schemas.StatusSucceeded) {
		t.Fatalf("release outcomes: %v, want one succeeded", statuses)
	}
}
