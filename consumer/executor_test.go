package consumer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/schemas"
)

// harness runs one executor against a real kfake broker over TCP.
type harness struct {
	t       *testing.T
	brokers []string
	effects string
	cfgFile *config.Config
	cl      *kgo.Client
	stop    func()
	ex      *consumer.Executor
	// tune, when set, adjusts the executor's config before start.
	tune func(*consumer.Config)
	// reg, when set, is the registry the executor's metrics go to.
	reg *prometheus.Registry
	// opts are more executor options.
	opts []consumer.Option
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return newHarnessOn(t, c.ListenAddrs())
}

// newHarnessOn runs against any Kafka-protocol brokers (kfake, Redpanda).
func newHarnessOn(t *testing.T, brokers []string) *harness {
	t.Helper()
	var err error
	dir := t.TempDir()
	h := &harness{t: t, brokers: brokers, effects: filepath.Join(dir, "effects.log")}
	yaml := fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 500ms\n", h.effects)
	path := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	h.cfgFile, err = config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	h.cl, err = kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ProducerLinger(0),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics("onceflight.outcomes", "onceflight.deadletter"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cl.Close)
	return h
}

// useConfig replaces the harness's actions file with yaml.
func (h *harness) useConfig(yaml string) {
	h.t.Helper()
	path := filepath.Join(h.t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		h.t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		h.t.Fatal(err)
	}
	h.cfgFile = c
}

// start runs an executor with its Pebble under dataDir until stop.
func (h *harness) start(dataDir string) {
	h.t.Helper()
	store, err := dedupe.Open(dataDir)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := consumer.Config{
		Brokers: h.brokers, Partitions: 3, SessionTimeout: 6 * time.Second,
		ClockDrift: 100 * time.Millisecond, ExecutorID: "test",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel()})),
	}
	if h.tune != nil {
		h.tune(&cfg)
	}
	reg := h.reg
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	ex, err := consumer.New(cfg, h.cfgFile, store, append([]consumer.Option{consumer.WithRegisterer(reg)}, h.opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.ex = ex
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("run: %v", err)
			}
			store.Close()
		})
	}
	h.t.Cleanup(h.stop)
}

func (h *harness) submit(id, entity, key, data string) {
	h.t.Helper()
	h.submitAction(id, "noop.ping", entity, key, data)
}

func (h *harness) submitAction(id, action, entity, key, data string) {
	h.t.Helper()
	c := schemas.Command{ID: id, Source: "test", Type: action, Subject: entity, IdempotencyKey: key, Data: json.RawMessage(data)}
	r, err := schemas.EncodeCommand(c, schemas.Binary)
	if err != nil {
		h.t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	h.produce(r)
}

func (h *harness) produce(r *kgo.Record) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// outcomes reads outcome events until n have arrived, keyed by causation id.
func (h *harness) outcomes(n int, seen map[string][]schemas.Outcome, dead *[]*kgo.Record) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := 0
	for _, v := range seen {
		got += len(v)
	}
	for got < n {
		fs := h.cl.PollFetches(ctx)
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

func (h *harness) effectCount() map[string]int {
	f, err := os.Open(h.effects)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	n := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct{ Key string }
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			n[e.Key]++
		}
	}
	return n
}

func TestRepeatReuseUnknownAndDeadletter(t *testing.T) {
	h := newHarness(t)
	h.start(t.TempDir())

	h.submit("c1", "order-1", "k1", `{"amount":5}`)
	h.submit("c2", "order-1", "k1", `{"amount":5}`) // repeat
	h.submit("c3", "order-1", "k1", `{"amount":6}`) // reused with other data
	c := schemas.Command{ID: "c4", Source: "test", Type: "no.such", Subject: "order-2", IdempotencyKey: "k4"}
	r, _ := schemas.EncodeCommand(c, schemas.Structured)
	r.Topic = "onceflight.commands"
	h.produce(r)
	h.produce(&kgo.Record{Topic: "onceflight.commands", Value: []byte("not a cloudevent")})

	seen := map[string][]schemas.Outcome{}
	var dead []*kgo.Record
	h.outcomes(4, seen, &dead)

	first, repeat, reused, unknown := seen["c1"][0], seen["c2"][0], seen["c3"][0], seen["c4"][0]
	if first.Record.Status != schemas.StatusSucceeded || first.Replayed {
		t.Fatalf("first: %+v", first)
	}
	if !repeat.Replayed || repeat.Record.Hash != first.Record.Hash || string(repeat.Record.Result) != string(first.Record.Result) {
		t.Fatalf("repeat not the recorded result: %+v vs %+v", repeat.Record, first.Record)
	}
	if reused.Record.Status != schemas.StatusRejected || reused.Record.Error.Code != schemas.CodeKeyReused {
		t.Fatalf("reused: %+v", reused.Record)
	}
	if unknown.Record.Error == nil || unknown.Record.Error.Code != schemas.CodeUnknownAction {
		t.Fatalf("unknown: %+v", unknown.Record)
	}
	if n := h.effectCount()["k1"]; n != 1 {
		t.Fatalf("k1 executed %d times", n)
	}
	// Deadletter arrives in the same transaction as the outcomes.
	for len(dead) == 0 {
		h.outcomes(0, seen, &dead)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		fs := h.cl.PollFetches(ctx)
		cancel()
		for _, r := range fs.Records() {
			if r.Topic == "onceflight.deadletter" {
				dead = append(dead, r)
			}
		}
	}
	var reason string
	for _, hd := range dead[0].Headers {
		if hd.Key == "onceflight-deadletter-reason" {
			reason = string(hd.Value)
		}
	}
	if string(dead[0].Value) != "not a cloudevent" || reason == "" {
		t.Fatalf("deadletter: %q reason %q", dead[0].Value, reason)
	}
	if id := repeat.ID; id == first.ID {
		t.Fatalf("replay must have its own outcome id (causation differs)")
	}
}

func TestDataDirLossRestoresFromJournal(t *testing.T) {
	h := newHarness(t)
	dir1 := t.TempDir()
	h.start(dir1)
	for i := range 20 {
		h.submit(fmt.Sprintf("a%d", i), fmt.Sprintf("e-%d", i%7), fmt.Sprintf("key-%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.outcomes(20, seen, nil)
	h.stop()
	if err := os.RemoveAll(dir1); err != nil {
		t.Fatal(err)
	}

	h.start(t.TempDir()) // empty data dir: everything comes from the journal
	for i := range 20 {
		h.submit(fmt.Sprintf("b%d", i), fmt.Sprintf("e-%d", i%7), fmt.Sprintf("key-%d", i), `{}`)
	}
	h.outcomes(40, seen, nil)
	for i := range 20 {
		o := seen[fmt.Sprintf("b%d", i)]
		orig := seen[fmt.Sprintf("a%d", i)]
		if len(o) != 1 || !o[0].Replayed || o[0].Record.Hash != orig[0].Record.Hash {
			t.Fatalf("key-%d after data loss: %+v", i, o)
		}
	}
	for k, n := range h.effectCount() {
		if n != 1 {
			t.Fatalf("%s executed %d times", k, n)
		}
	}
	if !strings.HasPrefix(seen["a0"][0].Record.Hash, "sha256:") {
		t.Fatalf("hash: %q", seen["a0"][0].Record.Hash)
	}
}

func testLogLevel() slog.Level {
	if os.Getenv("ONCEFLIGHT_TEST_LOG") == "info" {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
