package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/internal/connectors/limit"
	"github.com/onceflight/onceflight/schemas"
)

// connFunc is a connector made of a function.
type connFunc func(ctx context.Context, req connectors.Request) connectors.Result

func (f connFunc) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	return f(ctx, req)
}

// chanSlot is an effect.Slot of a channel's capacity.
type chanSlot chan struct{}

func (s chanSlot) Take(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s chanSlot) Give() { <-s }

var answerOK = connFunc(func(context.Context, connectors.Request) connectors.Result {
	return connectors.Result{Kind: connectors.Succeeded}
})

// halfOpen opens s's breaker (BreakerAfter 1) and waits until its probe
// timer made it half-open.
func halfOpen(t *testing.T, s *limit.System) {
	t.Helper()
	acquire(t, s).Done(down, 0)
	for s.Stats().Breaker != limit.HalfOpen {
		time.Sleep(time.Millisecond)
	}
}

// A BeforeAttempt hook that panics (the executor's intent write: a bug,
// which the executor answers unresolved and survives) gives the system's
// permit and the partition's slot back. Kept, each such panic would take
// a slot of the system for good, and the breaker's probe would keep the
// breaker half-open with no probe ever answered: no request to the
// system again until a restart.
func TestPanickingHookGivesPermitAndSlotBack(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 2, BreakerAfter: 1, ProbeEvery: time.Millisecond})
	halfOpen(t, s)
	slot := make(chanSlot, 1)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the hook's panic did not reach the caller")
			}
		}()
		effect.Perform(context.Background(), answerOK, connectors.Request{Action: "a", Key: "k"}, effect.Policy{},
			effect.WithGate(s), effect.WithSlot(slot),
			effect.WithBeforeAttempt(func(context.Context, *connectors.Request) error { panic("a bug in the hook") }))
	}()
	if st := s.Stats(); st.InFlight != 0 || len(slot) != 0 {
		t.Fatalf("after the hook panicked: %d permits of the system and %d slots still taken", st.InFlight, len(slot))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := effect.Perform(ctx, answerOK, connectors.Request{Action: "a", Key: "k2"}, effect.Policy{},
		effect.WithGate(s), effect.WithSlot(slot))
	if d.Outcome != schemas.StatusSucceeded {
		t.Fatalf("the next command: %+v (breaker %s)", d, s.Stats().Breaker)
	}
}
