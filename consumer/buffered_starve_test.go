package consumer_test

import (
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A known limit of the bulkheads (docs/connectors.md, "One slow system
// does not starve the others"): commands waiting for a system that is
// down count against --max-buffered, so once they fill it the poll loop
// waits and a healthy system's commands behind them in the topic wait
// too. Skipped: it fails on main (round 24, review6: "5 of 5 commands
// unanswered after 20s" with --max-buffered 16; all 5 succeed with 1024).
// Run it with ONCEFLIGHT_KNOWN_LIMITS=1 once waiting commands no longer
// hold the buffer (for instance by being read again from the topic, as a
// hot entity's skipped commands are).
func TestDownSystemFillingMaxBufferedHoldsUpOthers(t *testing.T) {
	if !knownLimits() {
		t.Skip("known limit: waiting commands count against --max-buffered (docs/connectors.md)")
	}
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
	h.Tune = func(c *consumer.Config) { c.MaxInflight, c.MaxBuffered = 8, 16 }
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

func knownLimits() bool { return os.Getenv("ONCEFLIGHT_KNOWN_LIMITS") == "1" }
