package decide

import (
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// TestReconcileRows: every row of the reconcile table, and who asks.
func TestReconcileRows(t *testing.T) {
	req := func(source, data string) schemas.Command {
		return schemas.Command{ID: "r1", Source: source, Type: schemas.TypeReconcile, Subject: "order-1", IdempotencyKey: "reconcile/r1", Data: []byte(data)}
	}
	ok := req(ReconcilerSource, `{"key":"k1"}`)
	target := func(st schemas.Status) *schemas.Record {
		return &schemas.Record{IdempotencyKey: "k1", Entity: "order-1", Action: "pay", Status: st}
	}
	known := func(st schemas.Status, allowed, configured, learn bool) ReconcileInput {
		return ReconcileInput{Cmd: ok, TargetKnown: true, Target: target(st), RateKnown: true, Allowed: allowed, ActionConfigured: configured, CanLearn: learn}
	}
	hit := map[string]bool{}
	for _, tc := range []struct {
		name string
		in   ReconcileInput
		row  string
		verd Verdict
	}{
		{"no key", ReconcileInput{Cmd: req(ReconcilerSource, `{}`)}, "reconcile-malformed", Ignore},
		{"not json", ReconcileInput{Cmd: req(ReconcilerSource, `x`)}, "reconcile-malformed", Ignore},
		{"target not looked up", ReconcileInput{Cmd: ok}, "reconcile-target-lookup", LookUpTarget},
		{"no record", ReconcileInput{Cmd: ok, TargetKnown: true}, "reconcile-no-record", Ignore},
		{"rate not counted", ReconcileInput{Cmd: ok, TargetKnown: true, Target: target(schemas.StatusUnresolved)}, "reconcile-rate-check", CheckRate},
		{"rate not counted, not unresolved either", ReconcileInput{Cmd: ok, TargetKnown: true, Target: target(schemas.StatusSucceeded)}, "reconcile-rate-check", CheckRate},
		{"over the rate", known(schemas.StatusUnresolved, false, true, true), "reconcile-rate-limited", Ignore},
		{"over the rate, in progress", known(schemas.StatusInProgress, false, true, true), "reconcile-rate-limited", Ignore},
		{"in progress", known(schemas.StatusInProgress, true, true, true), "reconcile-inherit", Inherit},
		{"in progress, action gone", known(schemas.StatusInProgress, true, false, false), "reconcile-inherit", Inherit},
		{"succeeded", known(schemas.StatusSucceeded, true, true, true), "reconcile-not-unresolved", Ignore},
		{"held", known(schemas.StatusHeld, true, true, true), "reconcile-not-unresolved", Ignore},
		{"action gone", known(schemas.StatusUnresolved, true, false, false), "reconcile-action-gone", Ignore},
		{"cannot learn", known(schemas.StatusUnresolved, true, true, false), "reconcile-cannot-learn", Ignore},
		{"confirm", known(schemas.StatusUnresolved, true, true, true), "reconcile-confirm", Confirm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Reconcile(tc.in)
			wantRow(t, d.Decision, tc.row, tc.verd, "")
			if d.Row != "reconcile-malformed" && (d.Key != "k1" || d.Asker != schemas.ByReconciler) {
				t.Fatalf("key %q asker %q, want k1 asked by the reconciler", d.Key, d.Asker)
			}
			hit[d.Row] = true
		})
	}
	for _, tc := range []struct {
		name      string
		outcome   schemas.Status
		attempted bool
		row       string
		verd      Verdict
	}{
		{"still unknown", schemas.StatusUnresolved, false, "reconcile-still-unknown", Ignore},
		{"unknown after a new attempt", schemas.StatusUnresolved, true, "reconcile-settled", Settle},
		{"confirmed", schemas.StatusSucceeded, false, "reconcile-settled", Settle},
		{"not found, failed after a new attempt", schemas.StatusFailed, true, "reconcile-settled", Settle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Reconciled(tc.outcome, tc.attempted)
			wantRow(t, d, tc.row, tc.verd, "")
			hit[d.Row] = true
		})
	}
	covered(t, ReconcileRows, hit)
	if d := Reconcile(ReconcileInput{Cmd: req("ops-console", `{"key":"k1"}`)}); d.Asker != schemas.ByOperator {
		t.Fatalf("a request from another source is an operator's, got asker %q", d.Asker)
	}
}

// TestDueRows: every row of the reconciler's table.
func TestDueRows(t *testing.T) {
	const grace, window = time.Minute, time.Hour
	rec := func(st schemas.Status, finished, deadline time.Duration) schemas.Record {
		r := schemas.Record{IdempotencyKey: "k1", Entity: "order-1", Action: "pay", Status: st}
		if finished != 0 {
			f := now.Add(-finished)
			r.FinishedAt = &f
		}
		if deadline != 0 {
			d := now.Add(-deadline)
			r.Deadline = &d
		}
		return r
	}
	hit := map[string]bool{}
	for _, tc := range []struct {
		name  string
		rec   schemas.Record
		owned bool
		row   string
		verd  Verdict
	}{
		{"another executor's partition", rec(schemas.StatusUnresolved, time.Minute, 0), false, "not-owned", Ignore},
		{"unresolved long ago", rec(schemas.StatusUnresolved, 2*time.Hour, 0), true, "past-window", Ignore},
		{"unresolved", rec(schemas.StatusUnresolved, time.Minute, 0), true, "due-unresolved", Request},
		{"unresolved, no finish time", rec(schemas.StatusUnresolved, 0, 0), true, "due-unresolved", Request},
		{"in progress past deadline and grace", rec(schemas.StatusInProgress, 0, 2*time.Minute), true, "due-stale", Request},
		{"in progress within grace", rec(schemas.StatusInProgress, 0, 30*time.Second), true, "not-due", Ignore},
		{"in progress, no deadline", rec(schemas.StatusInProgress, 0, 0), true, "not-due", Ignore},
		{"succeeded", rec(schemas.StatusSucceeded, time.Minute, 0), true, "not-due", Ignore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Due(tc.rec, tc.owned, now, grace, window)
			wantRow(t, d, tc.row, tc.verd, "")
			hit[d.Row] = true
		})
	}
	covered(t, DueRows, hit)
}
