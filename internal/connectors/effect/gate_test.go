package effect_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// recordingGate admits every request at its notBefore (or none, when
// closed) and records
// what Perform asked and told it.
type recordingGate struct {
	mu        sync.Mutex
	closed    bool
	notBefore []time.Time
	answers   []connectors.Result
}

func (g *recordingGate) Acquire(ctx context.Context, notBefore time.Time) (effect.Permit, error) {
	g.mu.Lock()
	g.notBefore = append(g.notBefore, notBefore)
	closed := g.closed
	g.mu.Unlock()
	if closed {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	select { // a Gate waits until notBefore (limit.System does)
	case <-time.After(time.Until(notBefore)):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g, nil
}

func (g *recordingGate) Done(res connectors.Result, _ time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answers = append(g.answers, res)
}

// busyThenOK answers 429 with a Retry-After n times, then succeeds, and
// records when each request came.
type busyThenOK struct {
	n     int
	after time.Duration
	at    []time.Time
}

func (b *busyThenOK) Execute(context.Context, connectors.Request) connectors.Result {
	b.at = append(b.at, time.Now())
	if len(b.at) <= b.n {
		return connectors.Result{Kind: connectors.Unavailable, Message: "HTTP 429", Signal: connectors.SignalBusy, RetryAfter: b.after}
	}
	return connectors.Result{Kind: connectors.Succeeded, Result: json.RawMessage(`{}`)}
}

// A Retry-After is the earliest next attempt: Perform asks the Gate for
// no earlier, and the request does not leave earlier. The Gate hears
// every answer, the not-done ones included.
func TestRetryAfterIsTheEarliestNextAttempt(t *testing.T) {
	conn := &busyThenOK{n: 2, after: 150 * time.Millisecond}
	g := &recordingGate{}
	p := fastPolicy()
	p.MaxAttempts = 1 // "not done" uses up no attempt
	d := effect.Perform(context.Background(), conn, req("k"), p, effect.WithGate(g))
	if d.Outcome != schemas.StatusSucceeded || d.Attempts != 3 {
		t.Fatalf("decision %+v", d)
	}
	for i := 1; i < len(conn.at); i++ {
		if gap := conn.at[i].Sub(conn.at[i-1]); gap < conn.after {
			t.Errorf("attempt %d left %s after a Retry-After of %s", i+1, gap, conn.after)
		}
		if !g.notBefore[i].After(conn.at[i-1].Add(conn.after - time.Millisecond)) {
			t.Errorf("attempt %d: the Gate was asked for %s, before the Retry-After", i+1, g.notBefore[i])
		}
	}
	if len(g.answers) != 3 || g.answers[0].Signal != connectors.SignalBusy || g.answers[2].Kind != connectors.Succeeded {
		t.Fatalf("the Gate heard %+v", g.answers)
	}
}

// A Gate that never admits (a breaker that stays open) ends the call at
// the command's deadline: expired when nothing was sent, since nothing
// could have happened; nothing is ever sent.
func TestGateWaitEndsAtTheCommandsDeadline(t *testing.T) {
	conn := &busyThenOK{}
	g := &recordingGate{closed: true}
	d := effect.Perform(context.Background(), conn, req("k"), fastPolicy(), effect.WithGate(g),
		effect.WithNotAfter(time.Now().Add(50*time.Millisecond)))
	if d.Outcome != schemas.StatusFailed || d.Code != schemas.CodeExpired || d.Attempts != 0 || len(conn.at) != 0 {
		t.Fatalf("decision %+v after %d requests", d, len(conn.at))
	}
	// With an answer before it, the record names it and the waits.
	conn = &busyThenOK{n: 1000, after: 20 * time.Millisecond}
	p := fastPolicy()
	p.GiveUpAfter = 100 * time.Millisecond
	d = effect.Perform(context.Background(), conn, req("k"), p, effect.WithGate(&recordingGate{}))
	if d.Outcome != schemas.StatusFailed || d.Code != schemas.CodeConnectorUnavailable || d.Attempts != len(conn.at) {
		t.Fatalf("decision %+v after %d requests", d, len(conn.at))
	}
}

// The record after a "not done" answer lets a new owner execute again at
// once: no confirmation asked (this connector cannot confirm, so without
// it the key would be unresolved), and the inherited attempts use up
// none of max_attempts.
func TestNotDoneHooksAndLastNotDone(t *testing.T) {
	conn := &busyThenOK{n: 2}
	var hooked []int
	p := fastPolicy()
	d := effect.Perform(context.Background(), conn, req("k"), p, effect.WithNotDone(func(_ context.Context, r *connectors.Request, res connectors.Result) {
		hooked = append(hooked, r.Attempt)
	}))
	if d.Outcome != schemas.StatusSucceeded || len(hooked) != 2 || hooked[0] != 1 || hooked[1] != 2 {
		t.Fatalf("decision %+v, not-done hook for attempts %v", d, hooked)
	}
	conn = &busyThenOK{}
	r := req("k")
	r.Attempt = 7 // seven "not done" answers under the earlier owner
	p.MaxAttempts = 1
	d = effect.Reconcile(context.Background(), conn, r, p, effect.WithLastNotDone())
	if d.Outcome != schemas.StatusSucceeded || d.Attempts != 8 || len(conn.at) != 1 {
		t.Fatalf("decision %+v after %d requests", d, len(conn.at))
	}
}
