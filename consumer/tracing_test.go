package consumer_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestTraceOfTimeoutConfirmSucceeded: a refund whose first POST times out
// after the effect happened, and whose confirmation finds it, is traced as
// one command span (linked to the producer's trace) with a wait span and
// an execution span, under which one attempt span (ambiguous) and one
// confirm span (found) hang, each over the connector's HTTP call (otelhttp);
// the external system received the POST's span as traceparent; the
// attributes name action, key, entity, attempt and status.
func TestTraceOfTimeoutConfirmSucceeded(t *testing.T) {
	// The effect happens; the answer never comes in time. Confirm finds it.
	svc := apifake.NewEffects(t, apifake.WithScript(func(string, int) apifake.Fault { return apifake.HangAfterEffect }))

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`actions:
  payments.refund:
    connector: http
    url: %[1]s?customer={data.customer}
    confirm_url: %[1]s/{key}
    timeout: 300ms
`, svc.URL("")))
	h.Opts = append(h.Opts, consumer.WithTracerProvider(tp))
	h.Start(t.TempDir())

	const producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c := schemas.Command{ID: "c1", Source: "test", Type: "payments.refund", Subject: "order-1", IdempotencyKey: "refund-1",
		Data: json.RawMessage(`{"amount":25,"customer":"Jane Doe"}`), TraceParent: producer}
	r, err := schemas.EncodeCommand(c, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	h.Produce(r)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	if s := seen["c1"][0].Record.Status; s != schemas.StatusSucceeded {
		t.Fatalf("outcome %s, want succeeded after the confirmation", s)
	}
	h.Stop()

	spans := exp.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		name := s.Name
		if strings.HasPrefix(name, "onceflight.command ") {
			name = "onceflight.command"
		}
		byName[name] = append(byName[name], s)
	}
	one := func(name string) tracetest.SpanStub {
		t.Helper()
		if len(byName[name]) != 1 {
			t.Fatalf("%d %s spans, want 1 (all: %v)", len(byName[name]), name, names(spans))
		}
		return byName[name][0]
	}
	cmd, wait, exec, att, conf := one("onceflight.command"), one("onceflight.wait"), one("onceflight.execute"), one("onceflight.attempt"), one("onceflight.confirm")
	childOf := func(child, parent tracetest.SpanStub) {
		t.Helper()
		if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
			t.Errorf("%s is not a child of %s", child.Name, parent.Name)
		}
	}
	childOf(wait, cmd)
	childOf(exec, cmd)
	childOf(att, exec)
	childOf(conf, exec)
	if len(cmd.Links) != 1 || cmd.Links[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("command span links %v, want the producer's trace", cmd.Links)
	}
	if cmd.SpanContext.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("the command span is in the producer's trace; it should be linked, not a child")
	}
	attrs := func(s tracetest.SpanStub) map[attribute.Key]string {
		m := map[attribute.Key]string{}
		for _, kv := range s.Attributes {
			m[kv.Key] = kv.Value.String()
		}
		return m
	}
	for k, want := range map[attribute.Key]string{"onceflight.action": "payments.refund", "onceflight.key": "refund-1",
		"onceflight.entity": "order-1", "onceflight.status": "succeeded", "onceflight.replayed": "false"} {
		if got := attrs(cmd)[k]; got != want {
			t.Errorf("command span %s = %q, want %q", k, got, want)
		}
	}
	if a := attrs(att); a["onceflight.attempt"] != "1" || a["onceflight.answer"] != "ambiguous" {
		t.Errorf("attempt span attributes %v", a)
	}
	if a := attrs(conf); a["onceflight.answer"] != "found" {
		t.Errorf("confirm span attributes %v", a)
	}
	if a := attrs(exec); a["onceflight.status"] != "succeeded" || a["onceflight.attempt"] != "1" {
		t.Errorf("execute span attributes %v", a)
	}
	// The connector's HTTP calls are otelhttp client spans, one under the
	// attempt (the POST) and one under the confirmation (the GET), and
	// the POST's span is the traceparent the external system received.
	post, get := one("HTTP POST"), one("HTTP GET")
	childOf(post, att)
	childOf(get, conf)
	if post.SpanKind != trace.SpanKindClient || attrs(post)["http.request.method"] != "POST" || attrs(get)["http.response.status_code"] != "200" {
		t.Errorf("HTTP spans: POST %v %v, GET %v", post.SpanKind, attrs(post), attrs(get))
	}
	if u := attrs(post)["url.full"]; u != svc.URL("") {
		t.Errorf("HTTP POST url.full = %q, want %q", u, svc.URL(""))
	}
	want := fmt.Sprintf("00-%s-%s-01", post.SpanContext.TraceID(), post.SpanContext.SpanID())
	posts, _, _ := svc.Counts("refund-1")
	if gotParent := posts[0].Header.Get("traceparent"); gotParent != want {
		t.Errorf("the external system got traceparent %q, want the HTTP POST span's %q", gotParent, want)
	}
	if !wait.StartTime.Equal(cmd.StartTime) || wait.EndTime.Before(wait.StartTime) {
		t.Errorf("wait span %v..%v, command span from %v", wait.StartTime, wait.EndTime, cmd.StartTime)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
