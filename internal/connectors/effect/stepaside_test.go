package effect_test

import (
	"context"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// asideGate admits the first `admit` requests, then tells the call to
// step aside.
type asideGate struct{ admit int }

func (g *asideGate) Acquire(context.Context, time.Time) (effect.Permit, error) {
	if g.admit == 0 {
		return nil, effect.ErrStepAside
	}
	g.admit--
	return g, nil
}

func (g *asideGate) Done(connectors.Result, time.Duration) {}

// notDone answers every request "not done", saying an earlier request may
// still be in flight when inFlight.
type notDone struct {
	inFlight bool
	calls    int
}

func (c *notDone) Execute(context.Context, connectors.Request) connectors.Result {
	c.calls++
	return connectors.Result{Kind: connectors.Unavailable, Signal: connectors.SignalDown, Message: "HTTP 503", InFlight: c.inFlight}
}

// A call told to step aside decides nothing (CodeSteppedAside) when
// nothing it sent can have taken effect: before its first request, or
// after requests all answered "not done". After an answer that says an
// earlier request may still take effect, it does not step aside (it gives
// up as when its wait ends, unresolved): read again as new, the command
// could be executed a second time beside that request.
func TestStepAsideOnlyWhileNothingMayHaveHappened(t *testing.T) {
	for _, tc := range []struct {
		name     string
		admit    int
		inFlight bool
		code     string
		outcome  schemas.Status
	}{
		{"before any request", 0, false, effect.CodeSteppedAside, schemas.StatusUnresolved},
		{"after two not-done answers", 2, false, effect.CodeSteppedAside, schemas.StatusUnresolved},
		{"after an answer saying a request is in flight", 1, true, schemas.CodeAmbiguous, schemas.StatusUnresolved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := &notDone{inFlight: tc.inFlight}
			d := effect.Perform(context.Background(), conn, connectors.Request{Action: "a", Entity: "e", Key: "k", Attempt: 1},
				effect.Policy{Backoff: func() backoff.BackOff { return &backoff.ZeroBackOff{} }}, effect.WithGate(&asideGate{admit: tc.admit}))
			if d.Code != tc.code || d.Outcome != tc.outcome || conn.calls != tc.admit {
				t.Fatalf("decision %+v after %d requests, want %s %s after %d", d, conn.calls, tc.outcome, tc.code, tc.admit)
			}
		})
	}
}
