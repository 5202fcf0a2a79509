package httpconn

import (
	"net/http"
	"net/url"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traced wraps rt so that a request made under a recording span (the
// executor's attempt or confirm span, when tracing is on) gets an HTTP
// client span of its own, with the semantic-convention attributes (method,
// server, status), and carries that span as traceparent: the external
// system's spans then hang under the very request that caused them.
//
// The tracer is the one of the span in the request's context, so the
// connector needs no provider of its own; the propagator is W3C trace
// context whatever the process-wide one is, since traceparent is what
// docs/connectors.md promises the system. Without a recording span (tracing
// off, the default) the request passes straight through: otelhttp would
// otherwise clone the request and wrap both bodies on every call.
func traced(rt http.RoundTripper) http.RoundTripper {
	return otelhttp.NewTransport(shortURL{rt},
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithFilter(func(r *http.Request) bool { return trace.SpanFromContext(r.Context()).IsRecording() }))
}

// urlFull is the semantic conventions' attribute otelhttp sets to the
// whole URL.
const urlFull = attribute.Key("url.full")

// shortURL sets the HTTP span's url.full to the URL without its query
// (otelhttp has put the whole URL there when it calls this RoundTripper):
// an API's URL template may put command data or a credential in the query,
// and traces go to a collector that the record API's redaction does not
// cover.
type shortURL struct{ rt http.RoundTripper }

func (s shortURL) RoundTrip(r *http.Request) (*http.Response, error) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() && r.URL != nil {
		u := url.URL{Scheme: r.URL.Scheme, Host: r.URL.Host, Path: r.URL.Path, RawPath: r.URL.RawPath}
		span.SetAttributes(urlFull.String(u.String()))
	}
	return s.rt.RoundTrip(r)
}
