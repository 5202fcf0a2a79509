package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/brokertest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// The tests of this file run the executor on a real broker
// (internal/brokertest: Redpanda by default, Apache Kafka 3.9 or 4.x with
// ONCEFLIGHT_TEST_BROKER) where Docker runs, and skip with one line
// elsewhere. Failover with kill -9 and zombie fencing (SIGSTOP past the
// session) run on the built binary in internal/e2e, on the same broker
// when ONCEFLIGHT_TEST_BROKER is set there.

// TestRealBrokerPipeline: a command, its repeat and a reused key, through
// the transactional pipeline (intent, answer, TxnOffsetCommit of the low
// watermark): one effect, a replay, a refusal, and a clean audit.
func TestRealBrokerPipeline(t *testing.T) {
	h := onceflighttest.New(t, onceflighttest.OnBrokers(brokertest.Start(t)))
	h.Start(t.TempDir())
	h.Submit("r1", "order-1", "k1", `{"a":1}`)
	h.Submit("r2", "order-1", "k1", `{"a":1}`)
	h.Submit("r3", "order-1", "k1", `{"a":2}`)
	for i := range 20 {
		h.Submit(fmt.Sprintf("m%d", i), fmt.Sprintf("order-%d", i%7), fmt.Sprintf("m%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(23, seen, nil)
	if seen["r1"][0].Record.Status != schemas.StatusSucceeded || !seen["r2"][0].Replayed ||
		seen["r3"][0].Record.Status != schemas.StatusRejected {
		t.Fatalf("outcomes: r1 %+v r2 %+v r3 %+v", seen["r1"], seen["r2"], seen["r3"])
	}
	if n := h.EffectCount()["k1"]; n != 1 {
		t.Fatalf("k1 executed %d times", n)
	}
	h.Stop()
	h.Audit()
}

// TestRealBrokerRestore: an executor on an empty data dir restores every
// partition from the journal and answers old keys from their records.
func TestRealBrokerRestore(t *testing.T) {
	h := onceflighttest.New(t, onceflighttest.OnBrokers(brokertest.Start(t)))
	h.Start(t.TempDir())
	for i := range 6 {
		h.Submit(fmt.Sprintf("a%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("k%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(6, seen, nil)
	h.Stop()

	h.Start(t.TempDir())
	for i := range 6 {
		h.Submit(fmt.Sprintf("b%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("k%d", i), `{}`)
	}
	h.Outcomes(12, seen, nil)
	for i := range 6 {
		if o := seen[fmt.Sprintf("b%d", i)][0]; !o.Replayed || o.Record.Status != schemas.StatusSucceeded {
			t.Errorf("repeat b%d after restore: %+v", i, o)
		}
	}
	for k, n := range h.EffectCount() {
		if n != 1 {
			t.Errorf("%s executed %d times", k, n)
		}
	}
	h.Stop()
	h.Audit()
}

// TestRealBrokerTakeover: two executors share the partitions; one stops
// and the other takes its partitions over, answering the commands that
// arrive meanwhile once each.
func TestRealBrokerTakeover(t *testing.T) {
	h := onceflighttest.New(t, onceflighttest.OnBrokers(brokertest.Start(t)))
	a := h.StartNode("a", t.TempDir(), onceflighttest.NodeOptions{})
	b := h.StartNode("b", t.TempDir(), onceflighttest.NodeOptions{})
	onceflighttest.WaitFor(t, 90*time.Second, "both executors owning partitions", func() bool {
		return a.Ex.Ready() && b.Ex.Ready() && len(a.Ex.Owned()) > 0 && len(b.Ex.Owned()) > 0
	})
	seen := map[string][]schemas.Outcome{}
	for i := range 12 {
		h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("k%d", i), `{}`)
	}
	h.Outcomes(12, seen, nil)
	if err := a.Stop(); err != nil {
		t.Fatalf("stop a: %v", err)
	}
	onceflighttest.WaitFor(t, 90*time.Second, "b owning every partition", func() bool { return b.Owns(onceflighttest.Partitions) })
	for i := range 12 {
		h.Submit(fmt.Sprintf("d%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("k%d", i), `{}`)
		h.Submit(fmt.Sprintf("e%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("n%d", i), `{}`)
	}
	h.Outcomes(36, seen, nil)
	for i := range 12 {
		if o := seen[fmt.Sprintf("d%d", i)][0]; !o.Replayed {
			t.Errorf("repeat d%d after the takeover executed again: %+v", i, o)
		}
	}
	for k, n := range h.EffectCount() {
		if n != 1 {
			t.Errorf("%s executed %d times", k, n)
		}
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("stop b: %v", err)
	}
	h.Audit()
}
