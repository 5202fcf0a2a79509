package limit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/limit"
)

// A command that has sent a request and waits out its backoff (a
// notBefore) before it asks again waits for the system as much as a
// queued one: it is held in its executor's memory until the system
// answers or its give_up_after passes. While KeepWaiting such commands
// wait, a new command steps aside, as Room says. Counting only the queue,
// a new command took the place of every waiter asleep in its backoff, was
// sent as the next probe, and then waited too: over an outage the waiters
// grew by about one per probe, past KeepWaiting, until they filled
// --max-buffered again.
func TestStepAsideCountsWaitersInBackoff(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 2, BreakerAfter: 1, ProbeEvery: time.Hour, KeepWaiting: 1})
	acquire(t, s).Done(connectors.Result{Kind: connectors.Unavailable, Signal: connectors.SignalDown}, 0) // opens the breaker
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A command that was sent and answered "not done" waits out its
	// backoff, then waits for the breaker (Acquire: it may not step aside).
	sent := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, time.Now().Add(time.Hour))
		sent <- err
	}()
	for s.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	if got := s.Room(); got != 0 {
		t.Fatalf("room with KeepWaiting (1) command waiting in its backoff: %d, want 0", got)
	}
	fresh := make(chan error, 1)
	go func() {
		p, err := s.AcquireOrStepAside(ctx, time.Time{})
		if p != nil {
			p.Done(connectors.Result{}, 0)
		}
		fresh <- err
	}()
	for {
		select {
		case err := <-fresh:
			if !errors.Is(err, limit.ErrStepAside) {
				t.Fatalf("a new command with KeepWaiting waiting: %v, want ErrStepAside", err)
			}
			if st := s.Stats(); st.Waiting != 1 || st.SteppedAside != 1 {
				t.Fatalf("after the new command: %+v, want 1 waiting, 1 stepped aside", st)
			}
			cancel()
			if err := <-sent; !errors.Is(err, context.Canceled) {
				t.Fatalf("the waiter in its backoff: %v", err)
			}
			return
		default:
		}
		if st := s.Stats(); st.Waiting > 1 {
			t.Fatalf("a new command waits beside the one in its backoff (Room 0, KeepWaiting 1): %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}
