package limit_test

import (
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/limit"
)

// A probe that gets no clear answer (a timeout, a 500) does not close the
// breaker: the system was not found up, and closing would send every
// waiting command to it. The breaker opens again for the next probe; a
// clear answer to that one closes it.
func TestUnclearProbeKeepsTheBreakerOpen(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 2, BreakerAfter: 1, ProbeEvery: time.Millisecond})
	halfOpen(t, s)
	acquire(t, s).Done(connectors.Result{Kind: connectors.Ambiguous, Message: "sent, no response: timeout"}, time.Second)
	if st := s.Stats(); st.Breaker == limit.Closed || st.Closed != 0 {
		t.Fatalf("a probe that timed out: breaker %s, closed %d times", st.Breaker, st.Closed)
	}
	for s.Stats().Breaker != limit.HalfOpen {
		time.Sleep(time.Millisecond)
	}
	acquire(t, s).Done(connectors.Result{Kind: connectors.Succeeded}, time.Millisecond)
	if st := s.Stats(); st.Breaker != limit.Closed {
		t.Fatalf("a probe answered: breaker %s", st.Breaker)
	}
}
