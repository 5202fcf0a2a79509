package consumer_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A 500 after applying, with a confirm endpoint that is down: the record
// becomes unresolved (confirmation_timeout). When the confirm endpoint
// heals, the reconciler turns it succeeded and publishes the new outcome —
// with the one effect the service applied, never a second POST.
func TestUnresolvedThenReconciled(t *testing.T) {
	h := onceflighttest.New(t)
	var healthy atomic.Bool
	svc := apifake.NewEffects(t,
		apifake.WithScript(func(string, int) apifake.Fault {
			return apifake.Fault{Status: http.StatusInternalServerError, Body: "boom after applying", ContentType: "text/plain"}
		}),
		apifake.WithConfirmScript(func(string, int, bool) apifake.Fault {
			if !healthy.Load() {
				return apifake.Fault{Status: http.StatusServiceUnavailable, Body: "confirm unavailable", ContentType: "text/plain"}
			}
			return apifake.None // 200 when applied
		}))
	h.UseConfig(fmt.Sprintf(`reconcile:
  every: 300ms
actions:
  payments.refund:
    connector: http
    url: %[1]s
    confirm_url: %[1]s/{key}
    timeout: 300ms
    confirm_timeout: 600ms
`, svc.URL("")))
	reg := prometheus.NewRegistry()
	h.Reg = reg
	h.Start(t.TempDir())
	h.SubmitAction("c1", "payments.refund", "order-9", "refund-9", `{"amount":3}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	first := seen["c1"][0].Record
	if first.Status != schemas.StatusUnresolved || first.Error == nil || first.Error.Code != schemas.CodeConfirmationTimeout {
		t.Fatalf("want unresolved confirmation_timeout, got %s %+v", first.Status, first.Error)
	}
	// A repeat is answered from the unresolved record, not executed.
	h.SubmitAction("c2", "payments.refund", "order-9", "refund-9", `{"amount":3}`)
	h.Outcomes(2, seen, nil)
	if o := seen["c2"][0]; !o.Replayed || o.Record.Status != schemas.StatusUnresolved {
		t.Fatalf("repeat of unresolved: %+v", o)
	}
	healthy.Store(true)
	h.Outcomes(3, seen, nil)
	var settled *schemas.Outcome
	for _, o := range seen["c1"] {
		if o.Record.Status == schemas.StatusSucceeded {
			settled = &o
		}
	}
	if settled == nil || settled.Replayed {
		t.Fatalf("reconciled outcome for c1 missing: %+v", seen["c1"])
	}
	// The record tells how: a 500 (ambiguous), confirmations that never
	// answered (unresolved, established by confirmation), then the
	// reconciler's confirmation that found the refund.
	wantEvidence(t, first, schemas.StatusUnresolved, schemas.EstablishedByConfirmation,
		[]string{"attempt 1 ambiguous", "confirm executor unknown"}, "attempt 1 → ambiguous", "HTTP 500", "confirm asked by executor → unknown (no confirmation within 600ms")
	wantEvidence(t, settled.Record, schemas.StatusSucceeded, schemas.EstablishedByReconciler,
		[]string{"attempt 1 ambiguous", "confirm executor unknown", "confirm reconciler found"},
		"confirm asked by reconciler → found → succeeded, established by reconciler")
	// The figure an operator watches: one record went unresolved for
	// want of a confirmation, one success was the reconciler's.
	for _, c := range []struct {
		status, by string
	}{{"unresolved", schemas.EstablishedByConfirmation}, {"succeeded", schemas.EstablishedByReconciler}} {
		if got, ok := kafkatest.Gauge(t, reg, "onceflight_outcomes_established_total", "status", c.status, "established_by", c.by); !ok || got != 1 {
			t.Errorf("onceflight_outcomes_established_total{status=%q,established_by=%q} = %v (%v), want 1", c.status, c.by, got, ok)
		}
	}
	h.Audit()
	if n := svc.Effects("refund-9"); n != 1 {
		t.Fatalf("effects %d, want 1", n)
	}
}
