package consumer_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A hot entity's refill waits for room among the commands held, as a
// poll does: with the committer behind — here the brokers refuse every
// transaction, so nothing staged settles — the hot entity's answers
// stay within --max-buffered plus one poll and one refill
// (docs/memory.md). It refilled whenever it had run what it held, and its
// answers piled up, up to the staged bytes bound (here all 1 000, ~3 KB
// each, against a bound of 100).
func TestRefillWaitsForRoom(t *testing.T) {
	const (
		maxBuffered = 100
		perEntity   = 10
		poll        = 20
		hotN        = 1000
	)
	h, c := newClusterHarness(t)
	// noop.ping without an effects file: no fsync per command.
	h.UseConfig("actions:\n  noop.ping:\n    connector: noop\n    timeout: 500ms\n")
	h.Reg = prometheus.NewRegistry()
	h.Tune = func(cfg *consumer.Config) {
		cfg.MaxBuffered, cfg.MaxBufferedPerEntity, cfg.MaxPollRecords = maxBuffered, perEntity, poll
	}
	refillWaits := make(chan struct{}, 1)
	t.Cleanup(consumer.SetRefillWaitHook(func() {
		select {
		case refillWaits <- struct{}{}:
		default:
		}
	}))
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 30*time.Second, "executor ready", h.Ex.Ready)

	f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.outcomes", Err: kerr.TransactionAbortable, Count: -1})
	t.Cleanup(f.Remove)
	ids := produceCommands(t, h, "hot", "hot", 0, hotN)
	limit := float64(maxBuffered + poll + perEntity)
	onceflighttest.WaitFor(t, 60*time.Second, "a refill waiting for room, or the commands held past their bound", func() bool {
		select {
		case <-refillWaits:
			return true
		default:
			return peak(t, h.Reg, "total_commands") > limit
		}
	})
	if held := peak(t, h.Reg, "total_commands"); held > limit {
		t.Fatalf("commands held peaked at %.0f, over %.0f, while nothing staged settled", held, limit)
	}
	f.Remove()
	seen := map[string][]schemas.Outcome{}
	readUntilAnswered(t, h, seen, ids)
	kafkatest.OneOutcomeEach(t, seen, ids)
	checkEntityOrder(t, h, "hot", ids)
}
