package limit_test

import (
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/internal/connectors/limit"
)

// A system that gives no clear answer (each request times out, or a 500,
// 502 or 504 comes back) is as overloaded as one answering 429: rounds of
// such answers cut the limit as busy ones do. Only a healthy answer's
// latency was judged, so a system whose every request timed out kept all
// of max_concurrent hanging on it, each request holding a slot for the
// whole timeout.
func TestNoClearAnswerCutsTheLimit(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 10})
	timeout := connectors.Result{Kind: connectors.Ambiguous, Message: "sent, no response: context deadline exceeded"}
	for range 20 {
		ps := make([]effect.Permit, 0, 10)
		for range s.Stats().Limit {
			ps = append(ps, acquire(t, s))
		}
		for _, p := range ps {
			p.Done(timeout, 2*time.Second)
		}
	}
	if st := s.Stats(); st.Limit >= 10 || st.Breaker != limit.Closed {
		t.Fatalf("after 20 rounds of timeouts: limit %d of 10, breaker %s", st.Limit, st.Breaker)
	}
}
