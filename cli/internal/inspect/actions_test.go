package inspect

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/internal/config"
)

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.ParseWith("test.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return cfg
}

func only(t *testing.T, yaml string) Action {
	t.Helper()
	acts, err := Describe(parse(t, yaml), 0)
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	if len(acts) != 1 {
		t.Fatalf("got %d actions, want 1", len(acts))
	}
	return acts[0]
}

// steps maps each answer label to its step, the part of the table the
// classification functions and effect.NextStep decide.
func steps(a Action) map[string]string {
	m := map[string]string{}
	for _, r := range a.Answers {
		m[r.Answer] = r.Kind + "→" + r.Step
	}
	return m
}

// httpTable is the http answer table with ambiguous answers (a timeout
// after sending, 500/502/504) leading to step ambiguous; the other answers
// lead to the same steps whatever the configuration.
func httpTable(ambiguous string) map[string]string {
	return map[string]string{
		"timeout (request sent, no response)": "ambiguous→" + ambiguous,
		"HTTP 5xx (500, 502, 504)":            "ambiguous→" + ambiguous,
		"HTTP 503":                            "unavailable→retry",
		"HTTP 4xx (not 408, 425, 429)":        "rejected→failed",
		"HTTP 429 (and 408, 425)":             "unavailable→retry",
		"connection refused (not sent)":       "unavailable→retry",
	}
}

func holds(a Action) string {
	var s []string
	for _, g := range a.Guarantees {
		s = append(s, g.ID+"="+g.Holds)
	}
	return strings.Join(s, " ")
}

// The expected tables are written out here, not computed: if the http
// classification or Perform's rule changes, this test fails until the
// expectation (and the docs quoting it) follow.
func TestDescribeHTTP(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       map[string]string
		holds      string
		warnings   []string
	}{{
		name:     "no confirm, not idempotent",
		yaml:     "actions:\n  payments.refund:\n    connector: http\n    url: http://x/refund\n",
		want:     httpTable("unresolved"),
		holds:    "G1=relies on the external system G2=fully G3=fully",
		warnings: []string{"no confirm_url and not idempotent_by_key", "max_attempts 5 with no confirmation: no attempt that may have taken effect is repeated", "suggests money (refund)"},
	}, {
		name:  "confirm url and unique_by",
		yaml:  "actions:\n  payments.refund:\n    connector: http\n    url: http://x/refund\n    confirm_url: http://x/refund/{key}\n    unique_by: [refund_id]\n",
		want:  httpTable("confirm"),
		holds: "G1=relies on the external system G2=relies on the external system G3=relies on the external system",
	}, {
		name:     "idempotent by key, no confirm",
		yaml:     "actions:\n  mail.send:\n    connector: http\n    url: http://x/mail\n    idempotent_by_key: true\n    max_attempts: 3\n",
		want:     httpTable("re-execute"),
		holds:    "G1=relies on the external system G2=relies on the external system G3=relies on the external system",
		warnings: []string{"max_attempts 3 with no confirmation: after a timeout the same key is sent again up to 3 times"},
	}, {
		name:     "one attempt, no confirm",
		yaml:     "actions:\n  ship.label:\n    connector: http\n    url: http://x/label\n    max_attempts: 1\n",
		want:     httpTable("unresolved"),
		holds:    "G1=relies on the external system G2=fully G3=fully",
		warnings: []string{"no confirm_url and not idempotent_by_key"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := only(t, c.yaml)
			got := steps(a)
			if len(got) != len(c.want) {
				t.Errorf("answers = %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s: got %q, want %q", k, got[k], v)
				}
			}
			if h := holds(a); h != c.holds {
				t.Errorf("guarantees = %s, want %s", h, c.holds)
			}
			if len(a.Warnings) != len(c.warnings) {
				t.Fatalf("warnings = %q, want %d matching %q", a.Warnings, len(c.warnings), c.warnings)
			}
			for i, w := range c.warnings {
				if !strings.Contains(a.Warnings[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, a.Warnings[i], w)
				}
			}
		})
	}
}

func TestDescribeSystem(t *testing.T) {
	cfg := parse(t, "systems:\n  payments:\n    max_concurrent: 8\n    rate: 50\n    breaker: {after: 3, probe_every: 2s}\nactions:\n  payments.refund:\n    connector: http\n    url: http://x/r\n    system: payments\n  ping:\n    connector: noop\n")
	acts, err := Describe(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]System{
		"payments.refund": {Name: "payments", Shared: true, MaxConcurrent: "8", Rate: 50, Burst: 50, BreakerAfter: 3, ProbeEvery: "2s"},
		"ping":            {Name: "ping", MaxConcurrent: "--max-inflight", BreakerAfter: 5, ProbeEvery: "1s"},
	}
	for _, a := range acts {
		if a.Limits.System != want[a.Name] || a.Limits.GiveUpAfter != "1h0m0s" {
			t.Errorf("%s: %+v give up after %s, want %+v", a.Name, a.Limits.System, a.Limits.GiveUpAfter, want[a.Name])
		}
	}
	var b strings.Builder
	if err := WriteText(&b, acts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "payments (shared by name): at most 8 requests in flight (adapted to its answers), rate 50/s (burst 50), breaker after 3 down answers, probe every 2s") {
		t.Errorf("text:\n%s", b.String())
	}
}

func TestDescribeThen(t *testing.T) {
	a := only(t, "actions:\n  ship.label:\n    connector: http\n    url: http://x/label\n    confirm_url: http://x/label/{key}\n    max_attempts: 1\n    confirm_timeout: 10s\n    give_up_after: 10m\n")
	for _, r := range a.Answers {
		switch r.Step {
		case "retry":
			// "Not done" uses up no attempt, even with max_attempts 1.
			if !strings.Contains(r.Then, "using up no attempt, until give_up_after (10m0s)") {
				t.Errorf("%s: then = %q, want retries until give_up_after", r.Answer, r.Then)
			}
		case "confirm":
			if !strings.Contains(r.Then, "(GET http://x/label/{key}) for up to 10s: found → succeeded; not found → failed (connector_unavailable)") {
				t.Errorf("%s: then = %q, want the confirm URL and timeout", r.Answer, r.Then)
			}
		}
	}
}

func TestDescribeKafkaAndNoop(t *testing.T) {
	cfg := parse(t, `actions:
  orders.publish:
    connector: kafka
    topic: orders
  noop.ping:
    connector: noop
  noop.count:
    connector: noop
    effects_file: effects.log
`)
	acts, err := Describe(cfg, 1024)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Action{}
	for _, a := range acts {
		by[a.Name] = a
		if len(a.Warnings) != 0 {
			t.Errorf("%s: unexpected warnings %q", a.Name, a.Warnings)
		}
		if a.Limits.MaxDataBytes != 1024 {
			t.Errorf("%s: max data = %d", a.Name, a.Limits.MaxDataBytes)
		}
	}
	k := steps(by["orders.publish"])
	if k["timeout (no acknowledgement)"] != "ambiguous→confirm" || k["record refused (non-retriable, e.g. too large)"] != "rejected→failed" {
		t.Errorf("kafka answers = %v", k)
	}
	if h := holds(by["orders.publish"]); h != "G1=fully G2=fully G3=fully" {
		t.Errorf("kafka guarantees = %s", h)
	}
	if h := holds(by["noop.ping"]); h != "G1=fully G2=fully G3=fully" {
		t.Errorf("noop guarantees = %s", h)
	}
	if s := steps(by["noop.count"])["effects file append failed"]; s != "ambiguous→confirm" {
		t.Errorf("noop with effects file: append failed → %s", s)
	}
}

func TestWarningsAndOutput(t *testing.T) {
	cfg := parse(t, "actions:\n  billing.charge:\n    connector: http\n    url: http://x/c\n    idempotent_by_key: true\n    max_attempts: 1\n  ok.thing:\n    connector: noop\n")
	ws, err := Warnings(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || !strings.HasPrefix(ws[0], "action billing.charge: the name suggests money (charge)") {
		t.Errorf("warnings = %q", ws)
	}
	acts, _ := Describe(cfg, 0)
	var text, js bytes.Buffer
	if err := WriteText(&text, acts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"billing.charge (http)", "WARNING", "execute again with the same key, up to 1 attempts", "ok.thing (noop)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, text.String())
		}
	}
	if err := WriteJSON(&js, acts); err != nil {
		t.Fatal(err)
	}
	var back struct{ Actions []Action }
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Actions) != 2 || back.Actions[0].Answers[0].Step != "re-execute" {
		t.Errorf("json round trip: %v %+v", err, back)
	}
}
