package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/testlog"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestTracingOffByDefault: without an OTLP endpoint in the environment
// nothing is set up; an unsupported protocol is a usage error naming it.
func TestTracingOffByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	opt, stop, err := startTracing(context.Background(), slog.Default(), "ex", "test")
	if opt != nil || err != nil || stop == nil {
		t.Fatalf("tracing without an endpoint: %v %v", opt != nil, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if opt, _, _ := startTracing(context.Background(), slog.Default(), "ex", "test"); opt != nil {
		t.Fatal("OTEL_SDK_DISABLED=true still traced")
	}
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, _, err := startTracing(context.Background(), slog.Default(), "ex", "test"); err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc") {
		t.Fatalf("grpc protocol: %v", err)
	}
}

// TestTracingToUnreachableCollector: with the collector down, every
// command is still answered (spans leave in batches, off the execution
// path) and the failure is logged once at WARN, not once per batch.
func TestTracingToUnreachableCollector(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+deadAddr(t))
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opt, stop, err := startTracing(context.Background(), log, "ex-1", "test")
	if err != nil || opt == nil {
		t.Fatalf("start tracing: %v", err)
	}
	h := onceflighttest.New(t)
	h.Opts = append(h.Opts, opt)
	h.Start(t.TempDir())
	const n = 30
	for i := range n {
		h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("e%d", i%5), fmt.Sprintf("k%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(n, seen, nil)
	for id, os := range seen {
		if os[0].Record.Status != schemas.StatusSucceeded {
			t.Errorf("%s: %s", id, os[0].Record.Status)
		}
	}
	onceflighttest.WaitFor(t, 30*time.Second, "an export error logged", func() bool {
		return strings.Contains(logs.String(), "spans could not be exported")
	})
	h.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stop(ctx)
	if c := strings.Count(logs.String(), "level=WARN msg=\"tracing: spans could not be exported"); c != 1 {
		t.Errorf("%d WARN lines about the export, want 1:\n%s", c, logs.String())
	}
}
