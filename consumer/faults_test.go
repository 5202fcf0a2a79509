package consumer_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/schemas"
)

// node is one in-process executor of a multi-executor fault test: its own
// executor id (transactional id), Pebble directory and metrics registry.
type node struct {
	t     *testing.T
	id    string
	ex    *consumer.Executor
	reg   *prometheus.Registry
	store *dedupe.Store
	done  chan error
	stop  func() error
}

type nodeOpts struct {
	tune      func(*consumer.Config)
	storeOpts []dedupe.Option
	exOpts    []consumer.Option
}

// startNode runs an executor named id on the harness's brokers and actions.
// stop cancels it and returns what Run returned; it is also a cleanup.
func (h *harness) startNode(id, dataDir string, o nodeOpts) *node {
	h.t.Helper()
	store, err := dedupe.Open(dataDir, o.storeOpts...)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := consumer.Config{
		Brokers: h.brokers, Partitions: 3, SessionTimeout: 6 * time.Second,
		ClockDrift: 100 * time.Millisecond, ExecutorID: id,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel()})).With("executor", id),
	}
	if o.tune != nil {
		o.tune(&cfg)
	}
	n := &node{t: h.t, id: id, reg: prometheus.NewRegistry(), store: store, done: make(chan error, 1)}
	ex, err := consumer.New(cfg, h.cfgFile, store, append([]consumer.Option{consumer.WithRegisterer(n.reg)}, o.exOpts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	n.ex = ex
	ctx, cancel := context.WithCancel(context.Background())
	go func() { n.done <- ex.Run(ctx) }()
	var once sync.Once
	var runErr error
	n.stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-n.done
			store.Close()
		})
		return runErr
	}
	h.t.Cleanup(func() { _ = n.stop() })
	return n
}

// shortHeartbeats lets a session timeout below kgo's 3s default heartbeat
// interval hold: without it a 2s session expires between heartbeats.
var shortHeartbeats = []consumer.Option{consumer.WithKgoOpts(kgo.HeartbeatInterval(300 * time.Millisecond))}

// counter is the value of counter name with the given label values on the
// node's registry (0 when absent).
func (n *node) counter(name string, labels map[string]string) float64 {
	n.t.Helper()
	mfs, err := n.reg.Gather()
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

// waitFor polls cond every 20ms until it holds, failing the test after
// timeout with what.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// owns reports whether n owns exactly k partitions and is ready.
func (n *node) owns(k int) bool { return n.ex.Ready() && len(n.ex.Owned()) == k }

// groupMembers lists the member ids of the executors' consumer group.
func (h *harness) groupMembers() []string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dg, err := kadm.NewClient(h.cl).DescribeGroups(ctx, "onceflight")
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, g := range dg {
		for _, m := range g.Members {
			ids = append(ids, m.MemberID)
		}
	}
	return ids
}

// journalAll reads every committed journal record of the harness's three
// partitions, decoded (epoch markers and other kinds skipped).
func (h *harness) journalAll() []schemas.Record {
	h.t.Helper()
	var out []schemas.Record
	for p := range int32(3) {
		for _, r := range h.journal(p) {
			if k := headerValue(r, "onceflight-kind"); k != "" && k != "record" {
				continue
			}
			rec, err := schemas.UnmarshalRecord(r.Value)
			if err != nil {
				h.t.Fatalf("journal %d/%d: %v", p, r.Offset, err)
			}
			out = append(out, rec)
		}
	}
	return out
}

func headerValue(r *kgo.Record, key string) string {
	for _, hd := range r.Headers {
		if hd.Key == key {
			return string(hd.Value)
		}
	}
	return ""
}

// oneOutcomeEach checks that each command id in ids has outcomes of exactly
// one outcome id (republications of the same id are allowed, docs/events.md#execution-records).
func oneOutcomeEach(t *testing.T, seen map[string][]schemas.Outcome, ids []string) {
	t.Helper()
	for _, id := range ids {
		os := seen[id]
		if len(os) == 0 {
			t.Fatalf("command %s: no outcome", id)
		}
		for _, o := range os[1:] {
			if o.ID != os[0].ID {
				t.Fatalf("command %s answered twice: %s %s (by %s) and %s %s (by %s)", id,
					os[0].ID, os[0].Record.Status, os[0].Record.Executor, o.ID, o.Record.Status, o.Record.Executor)
			}
		}
	}
}

// A session timeout below kgo's default 3s heartbeat interval still holds a
// membership: the executor heartbeats often enough for its session.
func TestFaultShortSessionHoldsMembership(t *testing.T) {
	h := newHarness(t)
	n := h.startNode("test", t.TempDir(), nodeOpts{tune: func(c *consumer.Config) { c.SessionTimeout = 1500 * time.Millisecond }})
	waitFor(t, 20*time.Second, "a ready executor with a 1.5s session", func() bool { return n.owns(3) })
	h.submit("c1", "order-1", "k1", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.outcomes(1, seen, nil)
	time.Sleep(3 * time.Second) // two default heartbeat intervals: a session would have expired
	if !n.owns(3) {
		t.Fatalf("membership lost with a 1.5s session: ready %v, owns %v", n.ex.Ready(), n.ex.Owned())
	}
}
