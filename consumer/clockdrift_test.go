package consumer_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// The executor's --clock-drift reaches the confirmation of its own
// attempts, not only an inherited one's wait: an external system whose
// clock lags ours by less than the drift may still take a request after
// its deadline by our clock, so a "not found" asked before the deadline
// plus the drift is asked again. Trusted, the key was executed a second
// time (two effects).
func TestConfirmationWaitsOutTheClockDrift(t *testing.T) {
	path := filepath.Join(t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(path, []byte("actions:\n  lag.pay:\n    connector: lagging\n    timeout: 100ms\n    confirm_timeout: 20s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	actions, err := consumer.LoadActions(path, "lagging")
	if err != nil {
		t.Fatal(err)
	}
	sys := &laggingAPI{lag: 1500 * time.Millisecond, effects: map[string]int{}}
	h := onceflighttest.New(t)
	h.Config = actions
	h.Tune = func(c *consumer.Config) { c.ClockDrift = 2 * time.Second }
	h.Opts = []consumer.Option{consumer.WithConnector("lagging", func(*consumer.Action) (connectors.Connector, error) { return sys, nil })}
	h.Start(t.TempDir())
	h.SubmitAction("1", "lag.pay", "acct-1", "k-1", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	sys.end()
	if o := seen["1"]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded || sys.count("k-1") != 1 {
		t.Fatalf("outcome %+v, effects %d: a \"not found\" asked within the clock drift after the deadline was trusted", o, sys.count("k-1"))
	}
}

// laggingAPI answers its first request Ambiguous while the request is, in
// truth, still on its way; its clock lags ours by lag, so the request may
// land until its deadline plus lag by our clock. A lookup asked in
// [deadline, deadline+lag) misses it and it lands right after; one asked
// later finds it.
type laggingAPI struct {
	lag     time.Duration
	mu      sync.Mutex
	pending *connectors.Request
	effects map[string]int
}

func (l *laggingAPI) Execute(_ context.Context, r connectors.Request) connectors.Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.effects[r.Key] == 0 && l.pending == nil {
		l.pending = &r
		return connectors.Result{Kind: connectors.Ambiguous, Message: "no answer (still on its way)"}
	}
	l.effects[r.Key]++
	return connectors.Result{Kind: connectors.Succeeded, Result: []byte(`{"ok":true}`)}
}

func (l *laggingAPI) Confirm(_ context.Context, r connectors.Request) connectors.Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.pending != nil && !now.Before(l.pending.Deadline.Add(l.lag)) {
		l.landLocked()
	}
	found := l.effects[r.Key] > 0
	if l.pending != nil && !now.Before(l.pending.Deadline) {
		l.landLocked()
	}
	if found {
		return connectors.Result{Kind: connectors.Succeeded, Result: []byte(`{"ok":true}`)}
	}
	return connectors.Result{Kind: connectors.NotFound}
}

func (l *laggingAPI) landLocked() {
	l.effects[l.pending.Key]++
	l.pending = nil
}

// end lands a request still on its way: it arrives before the API's
// deadline whatever was asked meanwhile.
func (l *laggingAPI) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending != nil {
		l.landLocked()
	}
}

func (l *laggingAPI) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects[key]
}
