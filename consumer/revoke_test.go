package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// When a second executor joins, the first hands partitions over cleanly
// (cooperative-sticky): executions running on a revoked partition finish,
// their outcomes and offsets commit, then the partition moves. The new
// owner therefore finds final records — no in_progress key to inherit, so
// no confirmation and no second effect.
func TestRevocationDrainsAndCommits(t *testing.T) {
	h := onceflighttest.New(t)
	// Every execution runs while the group rebalances: joining takes
	// kfake about 3.5 s here, so the revocation lands in the middle of
	// it. A confirmation always answers "not found" (and counts).
	svc := apifake.NewEffects(t, apifake.WithDelay(func() time.Duration { return 6 * time.Second }),
		apifake.WithConfirmScript(func(string, int, bool) apifake.Fault { return apifake.Fault{Status: http.StatusNotFound} }))
	h.UseConfig(fmt.Sprintf("actions:\n  work.do:\n    connector: http\n    url: %[1]s\n    confirm_url: %[1]s/{key}\n    timeout: 10s\n", svc.URL("")))
	h.Start(t.TempDir())

	// One slow command on every partition, so whichever partition moves
	// has an execution in flight.
	const parts = 3
	var ids []string
	for p := int32(0); p < parts; p++ {
		for i := 0; ; i++ {
			ent := fmt.Sprintf("ent-%d", i)
			if partitioner.ForEntity(ent, parts) == p {
				id := fmt.Sprintf("c-%d", p)
				h.SubmitAction(id, "work.do", ent, "key-"+id, `{}`)
				ids = append(ids, id)
				break
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // the first executor has started them

	second, err := consumer.New(consumer.Config{
		Brokers: h.Brokers, DataDir: t.TempDir(), Partitions: parts, SessionTimeout: 6 * time.Second, ExecutorID: "second",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, h.Config, consumer.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- second.Run(ctx) }()
	defer func() {
		cancel()
		if err := within(t, done, 30*time.Second, "the second executor's Run to return after its cancel"); err != nil {
			t.Errorf("second executor: run: %v", err)
		}
	}()

	t0 := time.Now()
	owned := make(chan time.Duration, 1)
	go func() {
		for len(second.Owned()) == 0 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		owned <- time.Since(t0)
	}()
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(parts, seen, nil)
	// A moment for a wrong second answer to appear.
	time.Sleep(2 * time.Second)
	for _, id := range ids {
		if o := seen[id]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
			t.Fatalf("%s: %+v", id, o)
		}
	}
	select {
	case d := <-owned:
		t.Logf("the second executor got %v after %v; the executions ended about 5.7 s after it started", second.Owned(), d)
	case <-time.After(20 * time.Second):
		t.Fatal("the second executor never got a partition")
	}
	for k, n := range svc.EffectCounts() {
		if n != 1 {
			t.Errorf("%s: %d effects", k, n)
		}
	}
	confirms := 0
	for _, n := range svc.ConfirmsBy() {
		confirms += n
	}
	if n := confirms; n != 0 {
		t.Errorf("%d confirmations: a revoked execution was inherited instead of drained and committed", n)
	}
}
