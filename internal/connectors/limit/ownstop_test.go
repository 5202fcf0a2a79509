package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/internal/connectors/limit"
)

// An attempt cut short by our own stop (shutdown, the partition moved)
// tells the breaker and the adaptive limit nothing about the system: the
// connector's "sent, no response: context canceled" is not the system's
// answer. Taken for one, it closed a breaker whose probe was out (every
// waiting command then went to a system that is down) and reset the count
// of consecutive "down" answers.
func TestOwnStopIsNoAnswerOfTheSystem(t *testing.T) {
	stopped := func(s *limit.System) effect.Decision {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan struct{})
		conn := connFunc(func(ctx context.Context, _ connectors.Request) connectors.Result {
			close(out)
			<-ctx.Done()
			return connectors.Result{Kind: connectors.Ambiguous, Message: "sent, no response: " + ctx.Err().Error()}
		})
		go func() { <-out; cancel() }()
		d := effect.Perform(ctx, conn, connectors.Request{Action: "a", Key: "k"}, effect.Policy{}, effect.WithGate(s))
		if d.Code != effect.CodeInterrupted {
			t.Fatalf("decision %+v", d)
		}
		return d
	}
	// The probe.
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 2, BreakerAfter: 1, ProbeEvery: time.Millisecond})
	halfOpen(t, s)
	stopped(s)
	if st := s.Stats(); st.Breaker == limit.Closed || st.Closed != 0 || st.InFlight != 0 {
		t.Fatalf("a probe stopped by us: breaker %s, closed %d times, %d in flight", st.Breaker, st.Closed, st.InFlight)
	}
	// The count of consecutive "down" answers.
	s = limit.New(limit.Config{Name: "svc", MaxConcurrent: 2, BreakerAfter: 2})
	acquire(t, s).Done(down, 0)
	stopped(s)
	acquire(t, s).Done(down, 0)
	if st := s.Stats(); st.Breaker != limit.Open {
		t.Fatalf("two consecutive down answers with a stopped attempt between: breaker %s", st.Breaker)
	}
}
