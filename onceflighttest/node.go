package onceflighttest

import (
	"context"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/kafkaconf"
)

// Node is one in-process executor of a multi-executor test: its own
// executor id (transactional id), Pebble directory and metrics registry,
// so that tests can fence, restart and inspect each one on its own.
type Node struct {
	t testing.TB
	// ID is the executor id.
	ID string
	// Ex is the running executor.
	Ex *consumer.Executor
	// Reg is the registry of the executor's metrics.
	Reg *prometheus.Registry
	// Done receives what Run returned. A test that takes it must send it
	// back, for Stop (and the cleanup) to return.
	Done chan error
	stop func() error
}

// NodeOptions adjust one node.
type NodeOptions struct {
	// Tune adjusts the executor config before start.
	Tune func(*consumer.Config)
	// KafkaOpts are more franz-go options for the executor's clients
	// (ShortHeartbeats, a faulty dialer).
	KafkaOpts []kgo.Opt
	// ExecutorOpts are more executor options.
	ExecutorOpts []consumer.Option
}

// StartNode runs an executor named id on the harness's brokers and
// Config, with its Pebble under dataDir and its logs tagged with id. The
// node's Stop is also a cleanup; what Run returned is Stop's to report.
func (h *Harness) StartNode(id, dataDir string, o NodeOptions) *Node {
	h.t.Helper()
	cfg := h.config(id)
	cfg.DataDir = dataDir
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})).With("executor", id)
	if o.Tune != nil {
		o.Tune(&cfg)
	}
	if cfg.KafkaOpts == nil && o.KafkaOpts != nil {
		// As a connection with no properties: extra options alone must
		// not turn client metrics on (consumer.Config.KafkaOpts' default
		// holds only while they are nil).
		cfg.KafkaOpts = (*kafkaconf.Config)(nil).Opts()
	}
	cfg.KafkaOpts = append(cfg.KafkaOpts, o.KafkaOpts...)
	n := &Node{t: h.t, ID: id, Reg: prometheus.NewRegistry(), Done: make(chan error, 1)}
	ex, err := consumer.New(cfg, h.Config, append([]consumer.Option{consumer.WithRegisterer(n.Reg)}, o.ExecutorOpts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	n.Ex = ex
	ctx, cancel := context.WithCancel(context.Background())
	go func() { n.Done <- ex.Run(ctx) }()
	var once sync.Once
	var runErr error
	n.stop = func() error {
		once.Do(func() {
			cancel()
			runErr = stopped(n.t, n.Done)
		})
		return runErr
	}
	h.t.Cleanup(func() { _ = n.stop() })
	return n
}

// stopTimeout bounds how long a stop waits for Run to return after its
// context is cancelled: far above a graceful stop (RevokeTimeout, then the
// shutdown of the chores), so that only a hang reaches it.
const stopTimeout = 60 * time.Second

// stopped waits for what Run returned on done, failing the test with
// every goroutine's stack if it takes longer than stopTimeout: a Run that
// does not return is a hang to show, not one to wait out until the
// package's timeout kills every test after it.
func stopped(t testing.TB, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(stopTimeout):
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("Run did not return within %s of its cancel; goroutines:\n%s", stopTimeout, b.String())
		return nil
	}
}

// Stop cancels the node's executor, closes its Pebble and returns what Run
// returned; later calls return the same.
func (n *Node) Stop() error { return n.stop() }

// Owns reports whether n owns exactly k partitions and is ready.
func (n *Node) Owns(k int) bool { return n.Ex.Ready() && len(n.Ex.Owned()) == k }

// Counter is the sum of counter name's series whose labels include labels,
// on the node's registry (0 when absent).
func (n *Node) Counter(name string, labels map[string]string) float64 {
	n.t.Helper()
	mfs, err := n.Reg.Gather()
	if err != nil {
		n.t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			ok := true
			for k, v := range labels {
				ok = ok && have[k] == v
			}
			if ok {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// WaitFor polls cond every 20ms until it holds, failing the test after
// timeout with what: executors get ready, rebalance and answer on their
// own time, and a test must wait for a state rather than sleep.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
