package consumer_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// While a system stays down, the commands waiting for it stay bounded
// however many probes go out: many entities with several commands each
// arrive for it behind a small --max-buffered, and a healthy system's
// commands behind them are answered. Each probe is a waiting command's
// request, after which it waits out its backoff asleep; counted as
// waiting only while queued, each sleeper let one more new command in,
// which became the next probe and waited too, until --max-buffered was
// full and the poll loop stopped: on main the system's waiters reached 16
// (--max-buffered) and "5 of 5 commands unanswered after 30s".
func TestDownSystemWaitersStayBoundedOverProbes(t *testing.T) {
	t.Parallel() // it waits: for probes, then for the revoke timeout at its stop
	var posts atomic.Int32
	down := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	fast := &fakeAPI{capacity: 1000, applied: map[string]int{}}
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`systems:
  payments:
    max_concurrent: 4
    breaker:
      after: 2
      probe_every: 20ms
actions:
  payments.refund:
    connector: http
    url: %s/refunds
    system: payments
  notify.send:
    connector: http
    url: %s/notify
`, down, serve(t, fast)))
	h.Tune = func(c *consumer.Config) { c.MaxInflight, c.MaxBuffered, c.RevokeTimeout = 8, 16, 2*time.Second }
	h.Start(t.TempDir())
	const entities, each = 100, 3
	for k := range each {
		for e := range entities {
			h.SubmitAction(fmt.Sprintf("d%d-%d", e, k), "payments.refund", fmt.Sprintf("ent-d%d", e), fmt.Sprintf("ent-d%d-%d", e, k), `{}`)
		}
	}
	onceflighttest.WaitFor(t, 60*time.Second, "40 requests", func() bool { return posts.Load() >= 40 })
	// New entities' commands go on arriving through the outage.
	for i := range 100 {
		h.SubmitAction(fmt.Sprintf("n%d", i), "payments.refund", fmt.Sprintf("ent-n%d", i), fmt.Sprintf("ent-n%d-0", i), `{}`)
		time.Sleep(20 * time.Millisecond) // about a probe's interval: pacing, not a bound
	}
	seen := map[string][]schemas.Outcome{}
	if got := outcomesOf(t, h, seen, submitMany(t, h, "f", "notify.send", 5), 30*time.Second); got[schemas.StatusSucceeded] != 5 {
		t.Fatalf("healthy commands: %v", got)
	}
	// KeepWaiting (4), the probe's place (1), and those that sent before
	// the breaker opened (max_concurrent + breaker.after).
	if s := systemStats(h, "payments"); s.Waiting+s.InFlight > 4+1+4+2 {
		t.Errorf("%d commands wait for the system that is down: %+v", s.Waiting+s.InFlight, s)
	}
	h.Stop()
}
