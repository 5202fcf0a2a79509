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

// Commands waiting for a system that is down do not fill --max-buffered
// so that the commands of a healthy system behind them in the topic wait
// too (docs/connectors.md, "One slow system does not starve the others"):
// past the few the system keeps waiting, they step aside and are read
// again from Kafka when it has room. On main before this (round 24,
// review6), with --max-buffered 16: "5 of 5 commands unanswered after
// 20s"; all 5 succeeded with 1024.
func TestDownSystemDoesNotFillMaxBuffered(t *testing.T) {
	t.Parallel() // it waits: for the breaker, then for the revoke timeout at its stop
	var posts atomic.Int32
	down := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	fast := &fakeAPI{capacity: 1000, applied: map[string]int{}}
	fastURL := serve(t, fast)
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`actions:
  payments.refund:
    connector: http
    url: %s/refunds
  notify.send:
    connector: http
    url: %s/notify
`, down, fastURL))
	h.Tune = func(c *consumer.Config) { c.MaxInflight, c.MaxBuffered, c.RevokeTimeout = 8, 16, 2*time.Second }
	h.Start(t.TempDir())
	submitMany(t, h, "d", "payments.refund", 40)
	onceflighttest.WaitFor(t, 30*time.Second, "the down system asked 16 times", func() bool { return posts.Load() >= 16 })
	seen := map[string][]schemas.Outcome{}
	count := outcomesOf(t, h, seen, submitMany(t, h, "f", "notify.send", 5), 30*time.Second)
	if count[schemas.StatusSucceeded] != 5 {
		t.Fatalf("healthy commands %v", count)
	}
	h.Stop()
}
