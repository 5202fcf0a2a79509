package consumer

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// Traces (docs/configuration.md#tracing): one span per command, from the moment it
// was queued for its entity to its answer, with a child for the wait for
// the entity's single flight, a child for the execution, and under that a
// child per attempt and per confirmation. The command's traceparent (the
// producer's trace) is a link, not the parent: the command may wait long
// after the producer's span ended, and a replay is a new trace of its own.
// The attempt's span context is what the external system receives as
// traceparent, so its own spans hang under the attempt that caused them.

// instrumentation is the tracer name, the executor's package.
const instrumentation = "github.com/onceflight/onceflight/consumer"

// WithTracerProvider makes the executor trace its commands through tp.
// Without it tracing is off and costs one nil check per command
// (BenchmarkTracingOff).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(e *Executor) { e.tracer = tp.Tracer(instrumentation) }
}

// Span attribute keys.
const (
	attrAction    = attribute.Key("onceflight.action")
	attrKey       = attribute.Key("onceflight.key")
	attrEntity    = attribute.Key("onceflight.entity")
	attrPartition = attribute.Key("onceflight.partition")
	attrOffset    = attribute.Key("onceflight.offset")
	attrAttempt   = attribute.Key("onceflight.attempt")
	attrStatus    = attribute.Key("onceflight.status")
	attrReplayed  = attribute.Key("onceflight.replayed")
	attrAnswer    = attribute.Key("onceflight.answer")
	attrCommand   = attribute.Key("onceflight.command_id")
)

// traceCommand starts the command's span at the moment it was queued and
// its wait span, which ends now: the time the command waited for its
// entity's earlier commands (single flight) and for the worker. The
// returned func ends the command's span with the status of its answer.
func (j *job) traceCommand(ctx context.Context, it *item) (context.Context, func()) {
	if j.e.tracer == nil {
		return ctx, func() {} // tracing off: not even a no-op span's attributes
	}
	tr := j.e.tracer
	queued := it.queued
	if queued.IsZero() {
		queued = time.Now()
	}
	opts := []trace.SpanStartOption{
		trace.WithTimestamp(queued), trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrAction.String(it.cmd.Type), attrKey.String(it.cmd.IdempotencyKey), attrEntity.String(it.cmd.Subject),
			attrCommand.String(it.cmd.ID), attrPartition.Int64(int64(it.partition)), attrOffset.Int64(it.offset)),
	}
	if sc := producerContext(it.cmd.TraceParent); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := tr.Start(ctx, "onceflight.command "+it.cmd.Type, opts...)
	if !span.IsRecording() {
		return ctx, func() {}
	}
	_, wait := tr.Start(ctx, "onceflight.wait", trace.WithTimestamp(queued))
	wait.End()
	return ctx, func() {
		for _, em := range j.emits {
			if em.outcome != nil && em.causation == it.cmd.ID {
				span.SetAttributes(attrStatus.String(string(em.outcome.Status)), attrReplayed.Bool(em.replayed))
				if em.outcome.Error != nil {
					span.SetAttributes(attribute.String("onceflight.error_code", em.outcome.Error.Code))
				}
			}
		}
		if j.err != nil {
			span.SetStatus(codes.Error, j.err.Error())
		}
		span.End()
	}
}

// traceExecution starts the span of one execution (Perform); end records
// its decision.
func (j *job) traceExecution(ctx context.Context, rec schemas.Record) (context.Context, func(effect.Decision)) {
	if j.e.tracer == nil {
		return ctx, func(effect.Decision) {}
	}
	ctx, span := j.e.tracer.Start(ctx, "onceflight.execute",
		trace.WithAttributes(attrAction.String(rec.Action), attrKey.String(rec.IdempotencyKey), attrEntity.String(rec.Entity)))
	return ctx, func(d effect.Decision) {
		span.SetAttributes(attrStatus.String(string(d.Outcome)), attrAttempt.Int(d.Attempts))
		if d.Code != "" {
			span.SetAttributes(attribute.String("onceflight.error_code", d.Code))
		}
		span.End()
	}
}

// producerContext parses a W3C traceparent.
func producerContext(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}

// traceparentOf formats ctx's span as a W3C traceparent ("" without one).
func traceparentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// tracedConnector gives every attempt and confirmation a span, and sends
// the external system the attempt's span as traceparent. It wraps a
// connector whose Confirm, if any, can answer (tracedConfirmer); one that
// cannot stays without Confirm, so effect.ConfirmerOf answers the same
// about the wrapper as about the connector.
type tracedConnector struct {
	inner connectors.Connector
	tr    trace.Tracer
}

type tracedConfirmer struct {
	tracedConnector
	conf connectors.Confirmer
}

func traceConnector(c connectors.Connector, tr trace.Tracer) connectors.Connector {
	t := tracedConnector{inner: c, tr: tr}
	if conf, ok := effect.ConfirmerOf(c); ok {
		return tracedConfirmer{tracedConnector: t, conf: conf}
	}
	return t
}

func (t tracedConnector) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	ctx, span := t.tr.Start(ctx, "onceflight.attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrAttempt.Int(req.Attempt), attribute.Int64("onceflight.fencing_token", req.FencingToken)))
	defer span.End()
	if tp := traceparentOf(ctx); tp != "" {
		req.TraceParent = tp
	}
	res := t.inner.Execute(ctx, req)
	span.SetAttributes(attrAnswer.String(res.Kind.String()))
	if res.Kind == connectors.Ambiguous || res.Kind == connectors.Unavailable {
		span.SetStatus(codes.Error, res.Message)
	}
	return res
}

func (t tracedConfirmer) Confirm(ctx context.Context, req connectors.Request) connectors.Result {
	ctx, span := t.tr.Start(ctx, "onceflight.confirm", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrAttempt.Int(req.Attempt)))
	defer span.End()
	if tp := traceparentOf(ctx); tp != "" {
		req.TraceParent = tp
	}
	res := t.conf.Confirm(ctx, req)
	answer := "unknown"
	switch res.Kind {
	case connectors.Succeeded:
		answer = "found"
	case connectors.NotFound:
		answer = "not_found"
	}
	span.SetAttributes(attrAnswer.String(answer))
	return res
}

// CanConfirm: the wrapper confirms exactly when the wrapped connector can.
func (t tracedConfirmer) CanConfirm() bool { return true }
