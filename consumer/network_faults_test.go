package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/faultnet"
	"github.com/onceflight/onceflight/schemas"
)

// TestFaultNetworkCutAndStall runs two executors; every connection of A to
// the broker goes through a faultnet.Net. A's network is stalled briefly
// (no rebalance needed), then cut for longer than the session timeout (B
// takes A's partitions), then healed (A is fenced, rejoins and becomes
// ready again). Commands submitted before, during and after the faults
// each get one outcome and take effect once, and the audit passes.
func TestFaultNetworkCutAndStall(t *testing.T) {
	h := newHarness(t)
	fn := faultnet.New()
	tune := func(c *consumer.Config) {
		c.SessionTimeout = 2 * time.Second
		c.RevokeTimeout = 200 * time.Millisecond
		c.TransactionTimeout = 3 * time.Second
	}
	a := h.startNode("A", t.TempDir(), nodeOpts{tune: tune,
		exOpts: append([]consumer.Option{consumer.WithKgoOpts(kgo.Dialer(fn.Dial))}, shortHeartbeats...)})
	b := h.startNode("B", t.TempDir(), nodeOpts{tune: tune, exOpts: shortHeartbeats})
	waitFor(t, 30*time.Second, "A and B to share the partitions", func() bool {
		return a.ex.Ready() && b.ex.Ready() && len(a.ex.Owned())+len(b.ex.Owned()) == 3 && len(a.ex.Owned()) > 0
	})
	var ids []string
	seen := map[string][]schemas.Outcome{}
	batch := func(tag string, n int) {
		for i := range n {
			id := fmt.Sprintf("%s%d", tag, i)
			ids = append(ids, id)
			h.submit(id, fmt.Sprintf("order-%d", i%6), "k-"+id, `{}`)
		}
	}
	batch("before", 6)
	h.outcomes(len(ids), seen, nil)

	fn.Stall()
	batch("stall", 6)
	time.Sleep(500 * time.Millisecond) // a stall well within the session
	fn.Resume()
	h.outcomes(len(ids), seen, nil)

	fn.Cut()
	batch("cut", 6)
	waitFor(t, 30*time.Second, "B to take every partition", func() bool { return b.owns(3) })
	h.outcomes(len(ids), seen, nil)
	fn.Resume()
	waitFor(t, 30*time.Second, "A ready again after the cut", a.ex.Ready)
	batch("after", 6)
	h.outcomes(len(ids), seen, nil)

	if err := a.stop(); err != nil {
		t.Errorf("A: %v", err)
	}
	if err := b.stop(); err != nil {
		t.Errorf("B: %v", err)
	}
	all := h.allOutcomes()
	oneOutcomeEach(t, all, ids)
	n := h.effectCount()
	for _, id := range ids {
		if s := all[id][0].Record.Status; s != schemas.StatusSucceeded {
			t.Errorf("%s: %s", id, s)
		}
		if n["k-"+id] != 1 {
			t.Errorf("k-%s took effect %d times, want 1", id, n["k-"+id])
		}
	}
	h.audit()
}
