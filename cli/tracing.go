package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/onceflight/onceflight/consumer"
)

// tracingEnabled reports whether the standard OpenTelemetry environment
// asks for traces: an OTLP endpoint named, and neither the SDK disabled
// nor the traces exporter set to none. Off by default: an executor sends
// nothing anywhere unless told to.
func tracingEnabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// startTracing returns the executor option that traces its commands
// through an OTLP/HTTP exporter configured by the standard OTEL_*
// environment (endpoint, headers, timeout, service name and resource
// attributes), and the function that flushes and stops it; nil and a
// no-op when tracing is off. Spans leave in batches on a goroutine of
// their own, so an unreachable collector never slows or fails an
// execution; its errors are logged once at WARN, then only at DEBUG.
func startTracing(ctx context.Context, log *slog.Logger, executorID, version string) (consumer.Option, func(context.Context), error) {
	if !tracingEnabled() {
		return nil, func(context.Context) {}, nil
	}
	if p := os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/protobuf" {
		return nil, nil, usageErrorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: this build exports traces over OTLP/HTTP only (http/protobuf)", p)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(
		attribute.String("service.name", serviceName()),
		attribute.String("service.instance.id", executorID),
		attribute.String("service.version", version)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, nil, fmt.Errorf("tracing: resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	var warned atomic.Bool
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if warned.CompareAndSwap(false, true) {
			log.Warn("tracing: spans could not be exported; executions go on without them (further export errors at DEBUG)", "err", err)
			return
		}
		log.Debug("tracing: export", "err", err)
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing on: spans of every command over OTLP/HTTP", "endpoint", firstNonEmpty(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")))
	return consumer.WithTracerProvider(tp), func(ctx context.Context) { _ = tp.Shutdown(ctx) }, nil
}

func serviceName() string {
	if s := os.Getenv("OTEL_SERVICE_NAME"); s != "" {
		return s
	}
	return "onceflight"
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
