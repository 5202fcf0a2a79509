package console

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// BenchmarkProjectionKeepsUp runs one executor on kfake at full noop
// throughput (every command produced at once) with the console's
// projection reading alongside, and reports:
//
//   - exec_cmds/s: the executor's throughput;
//   - max_lag_entries: the most journal and outcome entries the projection
//     was behind at any sample (every 100ms) while the executor worked;
//   - trail_ms: how long after the executor committed its last outcome the projection
//     had indexed it;
//   - exec_time/index_time: the executor's time over the time until the
//     projection had indexed everything
//     (1: the projection finished with the executor);
//   - catchup_entries/s: how fast a new console indexes the same topics
//     from their start.
func BenchmarkProjectionKeepsUp(b *testing.B) {
	const n = 4000
	for range b.N {
		h := onceflighttest.New(b)
		h.Tune = func(c *consumer.Config) {
			c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		}
		h.Start(filepath.Join(b.TempDir(), "state"))
		if err := onceflighttest.WaitTopics(context.Background(), h.Brokers, schemas.DefaultTopics()); err != nil {
			b.Fatal(err)
		}
		p, err := OpenProjection(b.TempDir(), h.Brokers, WithStatsInterval(100*time.Millisecond),
			WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()

		adm := kadm.NewClient(h.Client())
		// The executor is done when its group's committed offsets of the
		// commands topic reach the end: they commit in the transaction
		// of the outcomes.
		consumed := func() int64 {
			os, err := adm.FetchOffsets(ctx, consumer.Defaults().Group)
			if err != nil {
				return 0
			}
			var t int64
			os.Each(func(o kadm.OffsetResponse) {
				if o.Topic == "onceflight.commands" && o.Err == nil {
					t += o.At
				}
			})
			return t
		}
		recs := make([]*kgo.Record, n)
		for i := range n {
			c := schemas.Command{ID: fmt.Sprint("b-", i), Source: "bench", Type: "noop.ping", Subject: fmt.Sprint("e-", i%500), IdempotencyKey: fmt.Sprint("k-", i)}
			r, err := schemas.EncodeCommand(c, schemas.Binary)
			if err != nil {
				b.Fatal(err)
			}
			r.Topic = "onceflight.commands"
			recs[i] = r
		}
		start := time.Now()
		if err := h.Client().ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		var maxLag int64
		var execDone time.Time
		for {
			var lag int64
			for _, ps := range p.Stats().Partitions {
				lag += ps.Lag
			}
			maxLag = max(maxLag, lag)
			if execDone.IsZero() && consumed() >= n {
				execDone = time.Now()
			}
			if !execDone.IsZero() {
				c, err := p.OutcomeCounts()
				if err != nil {
					b.Fatal(err)
				}
				if c[schemas.StatusSucceeded] >= n {
					break
				}
			}
			if time.Since(start) > 3*time.Minute {
				b.Fatal("no end after 3 minutes")
			}
			time.Sleep(100 * time.Millisecond)
		}
		indexed := time.Now()
		execSecs := execDone.Sub(start).Seconds()
		b.ReportMetric(float64(n)/execSecs, "exec_cmds/s")
		b.ReportMetric(float64(maxLag), "max_lag_entries")
		b.ReportMetric(float64(indexed.Sub(execDone).Milliseconds()), "trail_ms")
		b.ReportMetric(execSecs/indexed.Sub(start).Seconds(), "exec_time/index_time")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		entries := p.Applied()
		_ = p.Close()

		// A new console over the same topics: how fast it catches up.
		p2, err := OpenProjection(b.TempDir(), h.Brokers, WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))))
		if err != nil {
			b.Fatal(err)
		}
		ctx2, cancel2 := context.WithCancel(context.Background())
		go func() { done <- p2.Run(ctx2) }()
		t0 := time.Now()
		for p2.Applied() < entries {
			if time.Since(t0) > 2*time.Minute {
				b.Fatal("catch-up: no end after 2 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.ReportMetric(float64(entries)/time.Since(t0).Seconds(), "catchup_entries/s")
		cancel2()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		_ = p2.Close()
		h.Stop()
	}
}
