package httpconn_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/connectors/effect"
)

// TestTracedRequestsDecideAlike: with tracing on (a recording span in the
// context, as the executor's attempt span is) every request goes through
// otelhttp, which clones it and wraps its bodies. The connector must still
// tell "sent, no answer" from "not sent" exactly as without tracing, so
// that an attempt is never retried blind (G3): each fault gives the same
// decision, attempts, effects and POSTs both ways, and traced, every
// request the service saw has its HTTP span, carried as its traceparent.
func TestTracedRequestsDecideAlike(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script func(string, int) apifake.Fault
	}{
		{"2xx", nil},
		{"hang after the effect, confirmed", always(apifake.HangAfterEffect)},
		{"connection cut after the effect", always(apifake.Fault{Cut: true})},
		{"500 before the effect, confirm 404, executed again", first(apifake.FailBeforeEffect, apifake.None)},
		{"503 before the effect", first(apifake.Fault{Before: true, Status: 503}, apifake.Fault{Status: 200})},
		{"422 rejected", always(apifake.Fault{Before: true, Status: 422, Body: `{"message":"no"}`})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				d                       effect.Decision
				effects, posts, confirm int
			}
			run := func(ctx context.Context) (result, *apifake.Effects) {
				s := newService(t, tc.script, nil)
				d := effect.Perform(ctx, connector(t, s, true), request(), policy())
				_, effects, confirms := s.Counts(key)
				d.Result, d.Message = nil, "" // these name the server's port
				return result{d, effects, s.Posts(), confirms}, s
			}
			plain, _ := run(context.Background())

			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			ctx, span := tp.Tracer("test").Start(context.Background(), "attempt")
			traced, s := run(ctx)
			span.End()
			if plain.d.Outcome != traced.d.Outcome || plain.d.Code != traced.d.Code || plain.d.Attempts != traced.d.Attempts ||
				plain.effects != traced.effects || plain.posts != traced.posts || plain.confirm != traced.confirm {
				t.Fatalf("traced %+v, untraced %+v", traced, plain)
			}
			ids := map[string]bool{}
			for _, sp := range exp.GetSpans() {
				if sp.SpanKind == trace.SpanKindClient {
					ids[sp.SpanContext.SpanID().String()] = true
				}
			}
			posts, _, _ := s.Counts(key)
			if len(posts) != traced.posts || len(ids) != traced.posts+traced.confirm {
				t.Fatalf("%d POSTs recorded, %d counted, %d confirms, %d HTTP spans", len(posts), traced.posts, traced.confirm, len(ids))
			}
			for _, p := range posts {
				if tp := p.Header.Get("traceparent"); len(tp) != 55 || !ids[tp[36:52]] {
					t.Errorf("a POST carried traceparent %q, not one of the HTTP spans", tp)
				}
			}
		})
	}
}
