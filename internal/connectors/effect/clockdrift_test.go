package effect_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// The external system honours an attempt's deadline by its own clock, which
// may lag ours by less than the clock drift (docs/guarantees.md, G1). A
// request still on its way when the deadline passes by our clock can then
// take effect after it, so a Confirm answering NotFound before the deadline
// plus the drift must be asked again, not trusted: trusted, it executed the
// key a second time beside the late first attempt (G3).
func TestConfirmWaitsForDeadlinePlusClockDrift(t *testing.T) {
	f := NewFaulty()
	f.Inject("k", FaultAmbiguousBefore)
	p := fastPolicy()
	p.Timeout = 100 * time.Millisecond
	p.ClockDrift = 2 * time.Second
	p.ConfirmTimeout = 10 * time.Second
	lag := &laggingSystem{Faulty: f, lag: 1500 * time.Millisecond}
	d := effect.Perform(context.Background(), lag, req("k"), p)
	lag.end()
	if d.Outcome != schemas.StatusSucceeded || d.EstablishedBy != schemas.EstablishedByConfirmation || f.Effects("k") != 1 {
		t.Fatalf("decision %+v, effects %d: a NotFound asked within the clock drift after the deadline was trusted", d, f.Effects("k"))
	}
}

// laggingSystem answers the first execution Ambiguous at once, while the
// request is, unknown to us, still on its way; the system's clock lags
// ours by lag, so the request may land until the deadline plus lag by our
// clock. A Confirm asked before the deadline finds nothing; one asked in
// [deadline, deadline+lag) finds nothing and the request lands right after
// its lookup (the race); one asked later finds it landed.
type laggingSystem struct {
	*Faulty
	lag     time.Duration
	pending *connectors.Request
}

func (l *laggingSystem) Execute(ctx context.Context, r connectors.Request) connectors.Result {
	res := l.Faulty.Execute(ctx, r)
	if l.pending == nil && res.Kind == connectors.Ambiguous {
		l.pending = &r
	}
	return res
}

func (l *laggingSystem) Confirm(ctx context.Context, r connectors.Request) connectors.Result {
	now := time.Now()
	if l.pending != nil && !now.Before(l.pending.Deadline.Add(l.lag)) {
		l.land()
	}
	res := l.Faulty.Confirm(ctx, r)
	if l.pending != nil && !now.Before(l.pending.Deadline) {
		l.land()
	}
	return res
}

// land applies the request on its way. It lands before its deadline by
// the system's clock, whatever ours says: no deadline check here.
func (l *laggingSystem) land() {
	r := *l.pending
	r.Deadline = time.Time{}
	l.Faulty.Execute(context.Background(), r)
	l.pending = nil
}

// end lands a request still on its way: it arrives before the system's
// deadline whatever we asked meanwhile.
func (l *laggingSystem) end() {
	if l.pending != nil {
		l.land()
	}
}

// Waiting for the deadline plus the clock drift is not part of
// confirm_timeout: an action whose confirm_timeout is shorter than its
// timeout plus the drift still executes again once a trusted NotFound
// says the first attempt did not happen, instead of giving up unresolved
// while it waits to be allowed to trust the answer.
func TestConfirmTimeoutCountsFromTheTrustedAnswer(t *testing.T) {
	f := NewFaulty()
	f.Inject("k", FaultAmbiguousBefore)
	p := fastPolicy()
	p.Timeout = 100 * time.Millisecond
	p.ClockDrift = time.Second
	p.ConfirmTimeout = 300 * time.Millisecond
	d := effect.Perform(context.Background(), f, req("k"), p)
	if d.Outcome != schemas.StatusSucceeded || d.Attempts != 2 || f.Effects("k") != 1 {
		t.Fatalf("decision %+v, effects %d: want the second attempt after a trusted not found", d, f.Effects("k"))
	}
}
