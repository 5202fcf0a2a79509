package consumer_test

import (
	"testing"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// An executor that holds only the public copy of an Ed25519 operator key
// accepts the operator's signed release and refuses a forged one whose
// "signature" is an HMAC keyed with everything the executor holds (its
// public key); the audit, with the same public copy, agrees.
func TestEd25519DecisionsVerifierOnly(t *testing.T) {
	h := onceflighttest.New(t)
	k, err := schemas.NewOperatorKey("ops-1")
	if err != nil {
		t.Fatal(err)
	}
	ops := &schemas.ControlKeys{Keys: []schemas.ControlKey{k}}
	pub, _ := ops.Public()
	h.Tune = func(c *consumer.Config) { c.ControlKeys = pub }
	h.Start(t.TempDir())
	h.Submit("c1", "order-1", "k1", `{"amount":5}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)

	// What someone with the executor's key file (public only) can make.
	forger := &schemas.ControlKeys{Keys: []schemas.ControlKey{{ID: "ops-1", Secret: pub.Keys[0].Public}}}
	if err := pub.SignControl(&schemas.Command{}); err == nil {
		t.Fatal("the public copy signed")
	}
	h.Decide(forger, "forged", schemas.TypeRelease, "order-1", schemas.Decision{Key: "k1", Reason: "again", By: "mallory"})
	h.Decide(ops, "rel", schemas.TypeRelease, "order-1", schemas.Decision{Key: "k1", Reason: "refund must be redone", By: "ann"})
	h.Submit("c2", "order-1", "k1", `{"amount":7}`)
	h.Outcomes(4, seen, nil)
	if o := seen["forged"][0]; o.Record.Status != schemas.StatusRejected || o.Record.Error.Code != schemas.CodeNotAllowed {
		t.Fatalf("forged release: %s %+v", o.Record.Status, o.Record.Error)
	}
	if o := seen["rel"][0]; o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("signed release: %s %+v", o.Record.Status, o.Record.Error)
	}
	if o := seen["c2"][0]; o.Replayed || o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("after the release: %+v", o)
	}
	if n := h.EffectsOf("order-1", "k1"); n != 2 {
		t.Fatalf("k1 executed %d times, want 2", n)
	}

	auditWithKeys(t, h, pub) // the public copy verifies what the operators signed
}
