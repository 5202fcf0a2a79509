package effect_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// laggingLookup is a system whose lookup shows a write only lag after it
// was made (a search index, an eventually consistent read replica). It
// takes the worst case of a write still on its way: made at the attempt's
// deadline, so the lookup shows it from deadline+lag on and answers
// NotFound before. Confirm asks the lookup at the instant it is called,
// and the decision depends only on that instant against the deadline, so
// the test is deterministic: a rule that trusts NotFound before
// deadline+LookupLag executes the key a second time, one that waits never.
type laggingLookup struct {
	*Faulty
	lag time.Duration
}

func (l *laggingLookup) Confirm(ctx context.Context, r connectors.Request) connectors.Result {
	if time.Now().Before(r.Deadline.Add(l.lag)) {
		return connectors.Result{Kind: connectors.NotFound, Message: "not (yet) listed"}
	}
	return l.Faulty.Confirm(ctx, r)
}

// An attempt took effect but its answer was lost, and the API's lookup
// shows the write only lag later. Trusted once the deadline plus the
// clock drift had passed, its NotFound executed the key again: two
// refunds on an API that does not deduplicate (G3). With LookupLag the
// NotFound is asked again until the deadline plus drift plus lag, and
// then found. Fails without Policy.LookupLag's rule in confirm.
func TestConfirmWaitsForTheLookupLag(t *testing.T) {
	f := NewFaulty()
	f.Inject("k", FaultAmbiguousAfter)
	p := fastPolicy()
	p.Timeout = 50 * time.Millisecond
	p.ClockDrift = 20 * time.Millisecond
	p.LookupLag = 300 * time.Millisecond
	sys := &laggingLookup{Faulty: f, lag: p.ClockDrift + p.LookupLag}
	d := effect.Perform(context.Background(), sys, req("k"), p)
	if d.Outcome != schemas.StatusSucceeded || d.EstablishedBy != schemas.EstablishedByConfirmation || f.Effects("k") != 1 {
		t.Fatalf("decision %+v, effects %d: a NotFound asked within the lookup lag after the deadline was trusted", d, f.Effects("k"))
	}
}

// Reconcile (a new owner, the reconciler) confirms an inherited attempt
// under the same rule: its NotFound within the lag is not trusted either.
func TestReconcileWaitsForTheLookupLag(t *testing.T) {
	f := NewFaulty()
	f.Inject("k", FaultAmbiguousAfter)
	p := fastPolicy()
	p.LookupLag = 300 * time.Millisecond
	sys := &laggingLookup{Faulty: f, lag: p.LookupLag}
	r := req("k")
	r.Deadline = time.Now().Add(p.Timeout)
	f.Execute(context.Background(), r) // the inherited attempt: applied, answer lost
	d := effect.Reconcile(context.Background(), sys, r, p)
	if d.Outcome != schemas.StatusSucceeded || d.EstablishedBy != schemas.EstablishedByConfirmation || f.Effects("k") != 1 {
		t.Fatalf("decision %+v, effects %d: an inherited attempt's NotFound within the lookup lag was trusted", d, f.Effects("k"))
	}
}

// A lookup that never answers within confirm_timeout after the lag leaves
// the record unresolved: waiting for the lag never ends in a blind
// execution. And the wait for the lag is not part of confirm_timeout (as
// the wait for the clock drift is not): a confirm_timeout shorter than
// the lag still lets a NotFound asked after it decide.
func TestLookupLagNeverEndsInABlindExecution(t *testing.T) {
	t.Run("lookup unknown throughout: unresolved", func(t *testing.T) {
		f := NewFaulty()
		f.Inject("k", FaultAmbiguousBefore)
		f.ConfirmUnknown = -1
		p := fastPolicy()
		p.LookupLag = 200 * time.Millisecond
		p.ConfirmTimeout = 100 * time.Millisecond
		d := effect.Perform(context.Background(), f, req("k"), p)
		if d.Outcome != schemas.StatusUnresolved || d.Code != schemas.CodeConfirmationTimeout || f.Executions("k") != 1 {
			t.Fatalf("decision %+v after %d executions: want unresolved confirmation_timeout, one execution", d, f.Executions("k"))
		}
	})
	t.Run("not found after the lag, confirm_timeout shorter than it: executed again", func(t *testing.T) {
		f := NewFaulty()
		f.Inject("k", FaultAmbiguousBefore)
		p := fastPolicy()
		p.LookupLag = 300 * time.Millisecond
		p.ConfirmTimeout = 100 * time.Millisecond
		d := effect.Perform(context.Background(), f, req("k"), p)
		if d.Outcome != schemas.StatusSucceeded || d.Attempts != 2 || f.Effects("k") != 1 {
			t.Fatalf("decision %+v, effects %d: want the second attempt after a trusted not found", d, f.Effects("k"))
		}
	})
}
