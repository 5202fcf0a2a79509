package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// BenchmarkTracingOff is what tracing costs a command when it is off (no
// OTLP endpoint). Compare with the ~100 µs of CPU a noop command costs
// (BENCHMARKS.md): measured 12–16 ns and no allocation, where the no-op
// tracer's spans with their attributes cost 2.2–3.1 µs and 20 allocations.
func BenchmarkTracingOff(b *testing.B) {
	e := &Executor{}
	j := &job{e: e}
	it := &item{partition: 1, offset: 42, queued: time.Now(),
		cmd: schemas.Command{ID: "c1", Type: "noop.ping", Subject: "order-1", IdempotencyKey: "k1", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	rec := schemas.Record{Action: "noop.ping", Entity: "order-1", IdempotencyKey: "k1"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, end := j.traceCommand(ctx, it)
		_, endExec := j.traceExecution(c, rec)
		endExec(effect.Decision{Outcome: schemas.StatusSucceeded, Attempts: 1})
		end()
	}
}
