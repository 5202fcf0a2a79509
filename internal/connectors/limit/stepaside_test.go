package limit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/limit"
)

// While a system is down, at most KeepWaiting commands wait for it: the
// breaker opening tells the calls queued past them that may step aside to
// do so, a call arriving then is told at once, a call that may not step
// aside waits whatever the count, and Room says how many may come back.
func TestStepAsideWhileDown(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 1, BreakerAfter: 1, ProbeEvery: time.Hour, KeepWaiting: 2})
	out := acquire(t, s) // the one request in flight; everyone else queues
	if got := s.Room(); got != 2 {
		t.Fatalf("room with the breaker closed: %d, want KeepWaiting (2)", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			p, err := s.AcquireOrStepAside(ctx, time.Time{})
			if p != nil {
				p.Done(connectors.Result{}, 0)
			}
			errs <- err
		}()
	}
	for s.Stats().Waiting != 4 {
		time.Sleep(time.Millisecond)
	}
	out.Done(connectors.Result{Kind: connectors.Unavailable, Signal: connectors.SignalDown}, 0) // opens the breaker
	for range 2 {
		if err := <-errs; !errors.Is(err, limit.ErrStepAside) {
			t.Fatalf("a call queued past KeepWaiting when the breaker opened: %v, want ErrStepAside", err)
		}
	}
	if st := s.Stats(); st.Waiting != 2 || st.SteppedAside != 2 || st.Breaker != limit.Open {
		t.Fatalf("after the breaker opened: %+v, want 2 waiting, 2 stepped aside, open", st)
	}
	if _, err := s.AcquireOrStepAside(ctx, time.Time{}); !errors.Is(err, limit.ErrStepAside) {
		t.Fatalf("a call arriving with KeepWaiting waiting: %v, want ErrStepAside at once", err)
	}
	if got := s.Room(); got != 0 {
		t.Fatalf("room with the breaker open and KeepWaiting waiting: %d", got)
	}
	// A call that may not step aside (it has sent a request before) waits.
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer wcancel()
	if _, err := s.Acquire(wctx, time.Time{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while down: %v, want to wait until its context ended", err)
	}
	cancel() // the two kept waiters give up: room for two again
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("a kept waiter: %v, want its own context's end", err)
		}
	}
	if got := s.Room(); got != 2 {
		t.Fatalf("room with the breaker open and nobody waiting: %d, want 2", got)
	}
}

// Without KeepWaiting nothing ever steps aside.
func TestNoStepAsideByDefault(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 1, BreakerAfter: 1, ProbeEvery: time.Hour})
	acquire(t, s).Done(connectors.Result{Kind: connectors.Unavailable, Signal: connectors.SignalDown}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.AcquireOrStepAside(ctx, time.Time{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireOrStepAside without KeepWaiting: %v, want to wait", err)
	}
}
