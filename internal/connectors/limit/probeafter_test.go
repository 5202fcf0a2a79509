package limit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/limit"
)

// A breaker opened (or kept open) by a "down" answer that says when to
// come back (503 with a Retry-After) sends its next probe no sooner:
// the system asked every client to stay away that long, and a probe
// every probe_every would be a request to it each second of a
// maintenance window (each costing its command the same wait).
func TestBreakerProbesNoSoonerThanRetryAfter(t *testing.T) {
	for _, probe := range []bool{false, true} {
		s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 2, BreakerAfter: 1, ProbeEvery: time.Millisecond})
		later := connectors.Result{Kind: connectors.Unavailable, Signal: connectors.SignalDown, RetryAfter: time.Hour}
		if probe {
			halfOpen(t, s)
		}
		acquire(t, s).Done(later, 0) // opens the breaker, or is the probe and reopens it
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := s.Acquire(ctx, time.Time{})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("probe %v: a request went out within the Retry-After of an hour (breaker %s)", probe, s.Stats().Breaker)
		}
	}
}
