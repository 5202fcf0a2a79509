package onceflighttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/schemas"
)

// Partitions is the partition count of the harness's executors (and of the
// topics they create): enough for a rebalance to move something, few
// enough that every partition is read quickly.
const Partitions = 3

// Harness runs executors in-process against a real Kafka protocol broker
// over TCP (its own kfake cluster unless OnBrokers), with the actions file
// of a noop action noop.ping whose effects go to Effects, so that a test
// can count what took effect. It reads what the executors publish with one
// read_committed client, as any consumer of the topics would.
//
// The exported fields configure the next Start (or StartNode, for Config);
// set them before it.
type Harness struct {
	t testing.TB
	// Brokers are the seed brokers of everything the harness starts.
	Brokers []string
	// Effects is the noop connector's effects file of the default actions.
	Effects string
	// Config is the loaded actions file the executors run (UseConfig
	// replaces it).
	Config *consumer.Actions
	// Tune, when set, adjusts Start's executor config before it starts.
	Tune func(*consumer.Config)
	// Reg, when set, is the registry Start's executor's metrics go to.
	Reg *prometheus.Registry
	// Opts are more executor options for Start.
	Opts []consumer.Option
	// Ex is the executor of the last Start.
	Ex *consumer.Executor

	stop   func()
	clOnce sync.Once
	cl     *kgo.Client
}

// Option configures New.
type Option func(*options)

type options struct{ brokers []string }

// OnBrokers runs the harness against brokers (kfake with faults, Redpanda)
// instead of a kfake cluster of its own.
func OnBrokers(brokers []string) Option { return func(o *options) { o.brokers = brokers } }

// New returns a harness; nothing runs until Start or StartNode. The
// cluster, the clients and the executors stop at the end of the test.
func New(t testing.TB, opts ...Option) *Harness {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.brokers == nil {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		o.brokers = c.ListenAddrs()
	}
	h := &Harness{t: t, Brokers: o.brokers, Effects: filepath.Join(t.TempDir(), "effects.log")}
	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 500ms\n", h.Effects))
	return h
}

// UseConfig replaces the harness's actions file with yaml, written to a
// temporary directory (relative paths resolve there). kinds are connector
// kinds of your own the file may name; register their factories in Opts
// (consumer.WithConnector).
func (h *Harness) UseConfig(yaml string, kinds ...string) {
	h.t.Helper()
	path := filepath.Join(h.t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		h.t.Fatal(err)
	}
	c, err := consumer.LoadActions(path, kinds...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.Config = c
}

// Client is the harness's client: it produces (no linger) and reads the
// outcomes and deadletter topics from their start, read_committed. It is
// created on first use, so that a harness that never reads (a benchmark)
// does not fetch alongside what it measures.
func (h *Harness) Client() *kgo.Client {
	h.clOnce.Do(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.ProducerLinger(0),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeTopics("onceflight.outcomes", "onceflight.deadletter"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(cl.Close)
		h.cl = cl
	})
	return h.cl
}

// logLevel is the executors' log level: warnings unless
// ONCEFLIGHT_TEST_LOG=info, so that a failing test can be rerun with the
// executor's story.
func logLevel() slog.Level {
	if os.Getenv("ONCEFLIGHT_TEST_LOG") == "info" {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// config is the executor config every harness executor starts from.
func (h *Harness) config(id string) consumer.Config {
	return consumer.Config{
		Brokers: h.Brokers, Partitions: Partitions, SessionTimeout: 6 * time.Second,
		ClockDrift: 100 * time.Millisecond, ExecutorID: id,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})),
	}
}

// Start runs an executor "test" of Config with its Pebble under dataDir
// until Stop (or the end of the test), and sets Ex. Tune, Reg and Opts
// apply; an error returned by Run fails the test.
func (h *Harness) Start(dataDir string) {
	h.t.Helper()
	cfg := h.config("test")
	cfg.DataDir = dataDir
	if h.Tune != nil {
		h.Tune(&cfg)
	}
	reg := h.Reg
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	ex, err := consumer.New(cfg, h.Config, append([]consumer.Option{consumer.WithRegisterer(reg)}, h.Opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.Ex = ex
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := stopped(h.t, done); err != nil {
				h.t.Errorf("run: %v", err)
			}
		})
	}
	h.t.Cleanup(h.stop)
}

// Stop stops the executor of the last Start; it returns once Run has
// (and with it closed the executor's Pebble). Stopping twice is a no-op.
func (h *Harness) Stop() {
	if h.stop != nil {
		h.stop()
	}
}

// Submit produces a noop.ping command (binary mode) for entity and key.
func (h *Harness) Submit(id, entity, key, data string) {
	h.t.Helper()
	h.SubmitAction(id, "noop.ping", entity, key, data)
}

// SubmitAction produces a command of action (binary mode) for entity and
// key, on the entity's partition.
func (h *Harness) SubmitAction(id, action, entity, key, data string) {
	h.t.Helper()
	c := schemas.Command{ID: id, Source: "test", Type: action, Subject: entity, IdempotencyKey: key, Data: json.RawMessage(data)}
	r, err := schemas.EncodeCommand(c, schemas.Binary)
	if err != nil {
		h.t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	h.Produce(r)
}

// Produce writes r synchronously (10s at most) with the harness's client.
func (h *Harness) Produce(r *kgo.Record) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Client().ProduceSync(ctx, r).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// Outcomes reads outcome events into seen, keyed by causation id, until it
// holds n (those already in seen count), failing after 60s (a handover
// on a loaded machine — rebalance, restore, an inherited attempt's
// deadline — took 45s between two outcomes). Deadletter
// records read meanwhile are appended to dead, or dropped if dead is nil.
func (h *Harness) Outcomes(n int, seen map[string][]schemas.Outcome, dead *[]*kgo.Record) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := 0
	for _, v := range seen {
		got += len(v)
	}
	for got < n {
		fs := h.Client().PollFetches(ctx)
		if ctx.Err() != nil {
			h.t.Fatalf("timed out with %d of %d outcomes", got, n)
		}
		for _, r := range fs.Records() {
			if r.Topic == "onceflight.deadletter" {
				if dead != nil {
					*dead = append(*dead, r)
				}
				continue
			}
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				h.t.Fatalf("undecodable outcome: %v", err)
			}
			seen[o.CausationID] = append(seen[o.CausationID], o)
			got++
		}
	}
}

// effects calls f with each decoded line of the effects file (none if it
// does not exist yet).
func (h *Harness) effects(f func(key, entity string)) {
	h.t.Helper()
	file, err := os.Open(h.Effects)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		h.t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		var e struct{ Key, Entity string }
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			f(e.Key, e.Entity)
		}
	}
}

// EffectCount counts the noop effects in Effects by idempotency key: how
// many times each key took effect.
func (h *Harness) EffectCount() map[string]int {
	h.t.Helper()
	n := map[string]int{}
	h.effects(func(key, _ string) { n[key]++ })
	return n
}

// EffectsOf counts the noop effects of (entity, key): keys are scoped to
// their entity.
func (h *Harness) EffectsOf(entity, key string) int {
	h.t.Helper()
	n := 0
	h.effects(func(k, e string) {
		if k == key && e == entity {
			n++
		}
	})
	return n
}

// Decide publishes an operator decision d of type typ for entity, signed
// with ks (nil leaves it unsigned, as a forger's would be).
func (h *Harness) Decide(ks *schemas.ControlKeys, id, typ, entity string, d schemas.Decision) {
	h.t.Helper()
	data, _ := json.Marshal(d)
	c := schemas.Command{ID: id, Source: "test-operator", Type: typ, Subject: entity, IdempotencyKey: typ + "/" + id, Data: data}
	if ks != nil {
		if err := ks.SignControl(&c); err != nil {
			h.t.Fatal(err)
		}
	}
	r, err := schemas.EncodeCommand(c, schemas.Binary)
	if err != nil {
		h.t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	h.Produce(r)
}

// StartVerifier starts an executor under a fresh data dir that verifies
// operator decisions with the public copy of a new Ed25519 operator key
// id, as a deployment does (docs/trust.md), and returns the operator's
// key file (which signs) and that public copy.
func (h *Harness) StartVerifier(id string) (ops, pub *schemas.ControlKeys) {
	h.t.Helper()
	k, err := schemas.NewOperatorKey(id)
	if err != nil {
		h.t.Fatal(err)
	}
	ops = &schemas.ControlKeys{Keys: []schemas.ControlKey{k}}
	pub, _ = ops.Public()
	h.Tune = func(c *consumer.Config) { c.ControlKeys = pub }
	h.Start(h.t.TempDir())
	return ops, pub
}
