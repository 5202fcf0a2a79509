package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

const (
	benchPartitions = 12
	benchEntities   = 10_000
	benchDelay      = 20 * time.Millisecond
)

// BenchmarkThroughput measures end-to-end throughput of one executor: b.N
// commands (unique keys, spread over 10,000 entities) already waiting on 12
// partitions, an http action whose server takes 20 ms per POST, and the time
// from the executor being ready (joined, 12 partitions restored) until b.N
// outcomes are readable by a read_committed consumer. Broker, topics,
// producing the commands and the executor's join are outside the timer.
//
// Use a fixed count, e.g.
//
//	go test ./consumer -run '^$' -bench BenchmarkThroughput -benchtime 2000x -count 3
//
// Metrics: cmds/s; peak_inflight = most POSTs the server saw at once;
// cmds/cycle = commands per committed cycle transaction; conns = TCP
// connections the server accepted; x_vs_600 = cmds/s over the 600/s ceiling
// of one 20 ms execution per partition at a time (12 / 20 ms).
func BenchmarkThroughput(b *testing.B) {
	ceiling := float64(benchPartitions) / benchDelay.Seconds()
	b.Logf("one execution per partition ceiling: %d partitions / %s = %.0f cmds/s", benchPartitions, benchDelay, ceiling)
	for _, c := range []struct{ inflight, poll int }{
		{1, 500}, {12, 500}, {64, 500}, {256, 500}, {256, 2000}, {512, 500}, {512, 2000}, {1024, 500},
	} {
		b.Run(fmt.Sprintf("inflight=%d/poll=%d", c.inflight, c.poll), func(b *testing.B) {
			benchThroughput(b, c.inflight, c.poll, ceiling, false, false)
		})
	}
}

// BenchmarkNoop is BenchmarkThroughput with a noop action: no connector
// cost, so it measures the executor's own work per command (decode, dedupe,
// records, transactions). Profile it with -cpuprofile.
//
//	go test ./consumer -run '^$' -bench BenchmarkNoop -benchtime 20000x -count 3
func BenchmarkNoop(b *testing.B) {
	benchThroughput(b, 1024, 500, 0, true, false)
}

// BenchmarkNoopRepeats: the same backlog again, every key already final,
// answered from its record (G2) — the timed part is the repeats only.
func BenchmarkNoopRepeats(b *testing.B) {
	benchThroughput(b, 1024, 500, 0, true, true)
}

// slowServer answers every POST with 201 after benchDelay and tracks the
// peak number of requests in flight.
type slowServer struct {
	*httptest.Server
	cur, peak, posts, conns atomic.Int64
}

func newSlowServer(b *testing.B) *slowServer {
	s := &slowServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		n := s.cur.Add(1)
		for {
			p := s.peak.Load()
			if n <= p || s.peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(benchDelay)
		s.cur.Add(-1)
		s.posts.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	b.Cleanup(s.Close)
	return s
}

// benchThroughput returns the rate and the CPU per command it reported;
// opts are more executor options (BenchmarkNoopCheckpoints).
func benchThroughput(b *testing.B, inflight, poll int, ceiling float64, noop, repeats bool, opts ...consumer.Option) (float64, float64) {
	b.StopTimer()
	n := b.N
	srv := newSlowServer(b)

	yaml := fmt.Sprintf("actions:\n  bench.post:\n    connector: http\n    url: %s/effects\n    timeout: 2s\n", srv.URL)
	if noop {
		yaml = "actions:\n  bench.post:\n    connector: noop\n"
	}
	h := onceflighttest.New(b)
	h.UseConfig(yaml)
	brokers := h.Brokers

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Topics as the executor would create them (it checks the settings of
	// existing ones: max.message.bytes, and the journal's retention).
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	adm := kadm.NewClient(prod)
	for _, t := range []struct {
		name  string
		parts int32
	}{
		{"onceflight.commands", benchPartitions}, {"onceflight.journal", benchPartitions},
		{"onceflight.outcomes", benchPartitions}, {"onceflight.deadletter", 1},
	} {
		mmb, keep := strconv.Itoa(consumer.Defaults().MaxMessageBytes), "-1"
		cfg := map[string]*string{"max.message.bytes": &mmb, "retention.ms": &keep}
		if _, err := adm.CreateTopic(ctx, t.parts, -1, cfg, t.name); err != nil {
			b.Fatal(err)
		}
	}

	// b.N commands up front; franz-go's default partitioner is murmur2 on
	// the key (= entity), the executor's mapping, so nothing is forwarded.
	batch := make([]*kgo.Record, 0, 1000)
	flush := func() {
		if err := prod.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	produce := func(idPrefix string) {
		for i := range n {
			r, err := schemas.EncodeCommand(schemas.Command{
				ID: fmt.Sprintf("%s-%d", idPrefix, i), Source: "bench", Type: "bench.post",
				Subject: fmt.Sprintf("e-%d", i%benchEntities), IdempotencyKey: fmt.Sprintf("k-%d", i),
				Data: json.RawMessage(`{"amount":1}`),
			}, schemas.Binary)
			if err != nil {
				b.Fatal(err)
			}
			r.Topic = "onceflight.commands"
			batch = append(batch, r)
			if len(batch) == cap(batch) {
				flush()
			}
		}
		if len(batch) > 0 {
			flush()
		}
	}
	produce("c")

	out, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics("onceflight.outcomes"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()

	reg := prometheus.NewRegistry()
	h.Reg = reg
	h.Tune = func(c *consumer.Config) {
		c.Partitions, c.MaxInflight, c.MaxPollRecords, c.ExecutorID = benchPartitions, inflight, poll, "bench"
		c.ClockDrift = 0 // the executor's default, as the benchmark has always run
	}
	h.Opts = opts
	h.Start(b.TempDir())
	defer h.Stop()
	ex := h.Ex

	// The clock starts once the group is joined and every partition restored.
	for !ex.Ready() || len(ex.Owned()) < benchPartitions {
		if ctx.Err() != nil {
			b.Fatal("executor not ready")
		}
		time.Sleep(time.Millisecond)
	}
	drain := func() (got, bad int) {
		for got < n {
			fs := out.PollFetches(ctx)
			if ctx.Err() != nil {
				b.Fatalf("timed out with %d of %d outcomes", got, n)
			}
			fs.EachRecord(func(r *kgo.Record) {
				got++
				if o, err := schemas.DecodeOutcome(r); err != nil || o.Record.Status != schemas.StatusSucceeded || o.Replayed != repeats {
					bad++
				}
			})
		}
		return got, bad
	}
	if repeats {
		// First the keys' executions, untimed; then the same keys again
		// under new command ids, answered from their records.
		repeats = false
		if _, bad := drain(); bad > 0 {
			b.Fatalf("%d first outcomes not succeeded", bad)
		}
		repeats = true
		produce("r")
	}
	b.ResetTimer()
	b.StartTimer()
	start := time.Now()
	cpu0 := processCPU()
	got, bad := drain()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()

	if bad > 0 {
		b.Fatalf("%d of %d outcomes not succeeded", bad, got)
	}
	if p := srv.posts.Load(); !noop && p != int64(n) {
		b.Fatalf("server saw %d POSTs for %d commands", p, n)
	}
	rate := float64(n) / elapsed.Seconds()
	b.ReportMetric(rate, "cmds/s")
	// CPU of the whole process (executor, in-process broker, the outcome
	// reader) per command: steadier than a rate on a shared machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/cmd")
	b.ReportMetric(float64(srv.peak.Load()), "peak_inflight")
	if ceiling > 0 {
		b.ReportMetric(rate/ceiling, "x_vs_600")
	}
	b.ReportMetric(float64(srv.conns.Load()), "conns")
	if cy := committedCycles(b, reg); cy > 0 {
		b.ReportMetric(float64(n)/cy, "cmds/txn")
	}
	return rate, float64(cpu.Microseconds()) / float64(n)
}

// processCPU is user+system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func committedCycles(b *testing.B, reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "onceflight_transactions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "committed" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
