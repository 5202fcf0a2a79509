package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/redpanda"

	"github.com/onceflight/onceflight/internal/executortest"
	"github.com/onceflight/onceflight/schemas"
)

// TestAgainstRedpanda runs the core scenario against a real Redpanda broker
// where a Docker engine is available; elsewhere (these machines, most CI) it
// skips cleanly. kfake is the default broker of every other test.
func TestAgainstRedpanda(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	testcontainers.SkipIfProviderIsNotHealthy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := redpanda.Run(ctx, "docker.redpanda.com/redpandadata/redpanda:v24.2.7", redpanda.WithAutoCreateTopics())
	if err != nil {
		t.Fatalf("start redpanda: %v", err)
	}
	t.Cleanup(func() { _ = testcontainers.TerminateContainer(c) })
	seed, err := c.KafkaSeedBroker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := executortest.New(t, executortest.OnBrokers([]string{seed}))
	h.Start(t.TempDir())
	h.Submit("r1", "order-1", "k1", `{"a":1}`)
	h.Submit("r2", "order-1", "k1", `{"a":1}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	if seen["r1"][0].Record.Status != schemas.StatusSucceeded || !seen["r2"][0].Replayed {
		t.Fatalf("outcomes: %+v", seen)
	}
	if n := h.EffectCount()["k1"]; n != 1 {
		t.Fatalf("k1 executed %d times", n)
	}
}
