package consumer_test

import (
	"github.com/prometheus/client_golang/prometheus"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A signed release replayed after its not_after (captured from a commands
// topic or a log, and written again later or into another deployment that
// trusts the same operator key) is refused rejected expired by the real
// executor, naming the not_after, and the key stays answered; a release
// still valid, and one without not_after (an earlier build's), are applied.
func TestOpExpiryReplayedDecisionRefused(t *testing.T) {
	h := onceflighttest.New(t)
	reg := prometheus.NewRegistry()
	h.Reg = reg
	ops, pub := h.StartVerifier("ops-1")

	now := time.Now().UTC().Truncate(time.Second)
	release := func(id string, notAfter time.Time) {
		h.Decide(ops, id, schemas.TypeRelease, "order-1", schemas.Decision{Key: "k1", Reason: "redo " + id, By: "ann", NotAfter: notAfter})
	}
	h.Submit("c1", "order-1", "k1", `{"amount":5}`)
	release("stale", now.Add(-time.Minute)) // signed a day ago for a day, say
	h.Submit("c2", "order-1", "k1", `{"amount":5}`)
	release("legacy", time.Time{})
	h.Submit("c3", "order-1", "k1", `{"amount":6}`)
	release("fresh", now.Add(time.Hour))
	h.Submit("c4", "order-1", "k1", `{"amount":7}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(7, seen, nil)

	o := seen["stale"][0]
	if o.Record.Status != schemas.StatusRejected || o.Record.Error == nil || o.Record.Error.Code != schemas.CodeExpired ||
		!strings.Contains(o.Record.Error.Message, "not_after "+now.Add(-time.Minute).Format(time.RFC3339)) {
		t.Fatalf("release past its not_after: %s %+v", o.Record.Status, o.Record.Error)
	}
	if o := seen["c2"][0]; !o.Replayed || o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("after the refused release, k1 is still answered by c1: %+v", o)
	}
	for _, id := range []string{"legacy", "fresh"} {
		if o := seen[id][0]; o.Record.Status != schemas.StatusSucceeded {
			t.Fatalf("release %s: %s %+v", id, o.Record.Status, o.Record.Error)
		}
	}
	for _, id := range []string{"c3", "c4"} {
		if o := seen[id][0]; o.Replayed || o.Record.Status != schemas.StatusSucceeded {
			t.Fatalf("%s after a release: %+v", id, o)
		}
	}
	if n := h.EffectsOf("order-1", "k1"); n != 3 {
		t.Fatalf("k1 executed %d times, want 3 (c1, c3, c4)", n)
	}
	// The refusal is counted, as a bad signature is: an old copy
	// replayed is worth an operator's look.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	expired := -1.0
	for _, mf := range mfs {
		if mf.GetName() != "onceflight_control_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "expired" {
					expired = m.GetCounter().GetValue()
				}
			}
		}
	}
	if expired != 1 {
		t.Fatalf(`onceflight_control_refused_total{reason="expired"} = %v, want 1`, expired)
	}
	auditWithKeys(t, h, pub)
}
