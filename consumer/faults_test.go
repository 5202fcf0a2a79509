package consumer_test

import (
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A session timeout below kgo's default 3s heartbeat interval still holds a
// membership: the executor heartbeats often enough for its session.
func TestFaultShortSessionHoldsMembership(t *testing.T) {
	h := onceflighttest.New(t)
	n := h.StartNode("test", t.TempDir(), onceflighttest.NodeOptions{Tune: func(c *consumer.Config) { c.SessionTimeout = 1500 * time.Millisecond }})
	onceflighttest.WaitFor(t, 20*time.Second, "a ready executor with a 1.5s session", func() bool { return n.Owns(3) })
	h.Submit("c1", "order-1", "k1", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	time.Sleep(3 * time.Second) // two default heartbeat intervals: a session would have expired
	if !n.Owns(3) {
		t.Fatalf("membership lost with a 1.5s session: ready %v, owns %v", n.Ex.Ready(), n.Ex.Owned())
	}
}
