package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/onceflight/onceflight/internal/connectors/effect"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
)

// minimal is a valid action body used by tests that vary one thing.
const minimal = "actions:\n  a:\n    connector: noop\n"

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		yaml string
		want []string // each must appear in the error text
	}{
		{"http without url", "actions:\n  payments.refund:\n    connector: http\n",
			[]string{`onceflight.yaml: action "payments.refund": field "url": required for connector http`}},
		{"unknown field", "actions:\n  x:\n    connector: http\n    url: http://a/\n    urll: http://b/\n",
			[]string{`onceflight.yaml:5:5: action "x": unknown field "urll"`}},
		{"all unknown fields reported", "actions:\n  x:\n    connector: noop\n    foo: 1\n    bar: 2\n",
			[]string{`4:5: action "x": unknown field "foo"`, `5:5: action "x": unknown field "bar"`}},
		{"invalid duration", "actions:\n  x:\n    connector: noop\n    timeout: 2 seconds\n",
			[]string{`onceflight.yaml:4:14: action "x": field "timeout": invalid duration "2 seconds"`}},
		{"duration without unit", "actions:\n  x:\n    connector: noop\n    timeout: 2\n",
			[]string{`field "timeout": invalid duration "2": a unit is required`}},
		{"days not accepted for timeout", "actions:\n  x:\n    connector: noop\n    timeout: 1d\n",
			[]string{`field "timeout": invalid duration "1d"`}},
		{"negative timeout", "actions:\n  x:\n    connector: noop\n    timeout: -1s\n",
			[]string{`field "timeout": must be positive`}},
		{"zero confirm timeout", "actions:\n  x:\n    connector: noop\n    confirm_timeout: 0s\n",
			[]string{`field "confirm_timeout": must be positive`}},
		{"missing connector", "actions:\n  x:\n    timeout: 1s\n",
			[]string{`onceflight.yaml: action "x": field "connector": required`}},
		{"null action", "actions:\n  x:\n",
			[]string{`action "x": field "connector": required`}},
		{"empty connector", "actions:\n  x:\n    connector: \"\"\n",
			[]string{`action "x": field "connector": must not be empty`}},
		{"unknown connector", "actions:\n  x:\n    connector: smtp\n",
			[]string{`3:16: action "x": field "connector": unknown connector "smtp"`}},
		{"unknown system", "actions:\n  x:\n    connector: noop\n    system: pay\n",
			[]string{`onceflight.yaml:4:13: action "x": field "system": no system "pay" under systems:`}},
		{"bad system limits", "systems:\n  pay:\n    max_concurrent: 0\n    rate: -5\n    breaker: {after: 0, probe_every: 0s}\n    limit: 3\n" + minimal,
			[]string{`:3:21: field "systems.pay.max_concurrent": must be at least 1, got 0`, `:4:11: field "systems.pay.rate": must be positive, got -5`,
				`field "systems.pay.breaker.after": must be at least 1, got 0`, `field "systems.pay.breaker.probe_every": must be positive`,
				`:6:5: unknown field "systems.pay.limit"`}},
		{"bad http transport", "systems:\n  pay:\n    http: {max_idle_conns: 0, max_conns: -1, idle_timeout: 0s, dial_timeout: 5, pool: 3, client: curl}\n" + minimal,
			[]string{`field "systems.pay.http.max_idle_conns": must be at least 1, got 0`, `field "systems.pay.http.client": must be fasthttp or net/http, got "curl"`, `field "systems.pay.http.max_conns": must be at least 1, got -1`,
				`field "systems.pay.http.idle_timeout": must be positive`, `field "systems.pay.http.dial_timeout": invalid duration "5"`,
				`unknown field "systems.pay.http.pool"`}},
		{"rate not a number", "systems:\n  pay:\n    rate: 50/s\n" + minimal,
			[]string{`field "systems.pay.rate": must be a number of requests per second`}},
		{"burst without rate", "systems:\n  pay:\n    burst: 5\n" + minimal,
			[]string{`field "systems.pay.burst": only valid with rate`}},
		{"system named like an action not using it", "systems:\n  a:\n    rate: 1\n" + minimal,
			[]string{`field "systems.a": has the name of action "a", which does not use it`}},
		{"zero give_up_after", "actions:\n  x:\n    connector: noop\n    give_up_after: 0s\n",
			[]string{`field "give_up_after": must be positive`}},
		{"max attempts zero", "actions:\n  x:\n    connector: noop\n    max_attempts: 0\n",
			[]string{`action "x": field "max_attempts": must be at least 1, got 0`}},
		{"max attempts negative", "actions:\n  x:\n    connector: noop\n    max_attempts: -3\n",
			[]string{`field "max_attempts": must be at least 1, got -3`}},
		{"max attempts not int", "actions:\n  x:\n    connector: noop\n    max_attempts: five\n",
			[]string{`field "max_attempts": must be an integer`}},
		{"max attempts huge", "actions:\n  x:\n    connector: noop\n    max_attempts: 99999999999999999999\n",
			[]string{`field "max_attempts"`}},
		{"confirm_url without key", "actions:\n  x:\n    connector: http\n    url: http://a/r\n    confirm_url: http://a/r/\n",
			[]string{`action "x": field "confirm_url": must contain {key}`}},
		{"invalid confirm_url", "actions:\n  x:\n    connector: http\n    url: http://a/r\n    confirm_url: /r/{key}\n",
			[]string{`field "confirm_url": invalid URL "/r/{key}"`}},
		{"invalid url scheme", "actions:\n  x:\n    connector: http\n    url: ftp://a/r\n",
			[]string{`field "url": invalid URL "ftp://a/r": scheme must be http or https`}},
		{"invalid url", "actions:\n  x:\n    connector: http\n    url: \"http://a b/%zz\"\n",
			[]string{`field "url": invalid URL`}},
		{"relative url", "actions:\n  x:\n    connector: http\n    url: refunds\n",
			[]string{`field "url": invalid URL "refunds"`}},
		{"on_duplicate", "actions:\n  x:\n    connector: noop\n    on_duplicate: skip\n",
			[]string{`field "on_duplicate": must be reject or hold, got "skip"`}},
		{"schema missing", "actions:\n  x:\n    connector: noop\n    schema: nope.json\n",
			[]string{`action "x": field "schema": schema file`, `not found`}},
		{"schema invalid JSON", "actions:\n  x:\n    connector: noop\n    schema: broken.schema.json\n",
			[]string{`action "x": field "schema": invalid schema broken.schema.json`}},
		{"schema invalid", "actions:\n  x:\n    connector: noop\n    schema: bad.schema.json\n",
			[]string{`action "x": field "schema": invalid schema bad.schema.json`}},
		{"schema is a directory", "actions:\n  x:\n    connector: noop\n    schema: .\n",
			[]string{`field "schema": schema`, `is not a regular file`}},
		{"kafka without topic", "actions:\n  x:\n    connector: kafka\n",
			[]string{`action "x": field "topic": required for connector kafka`}},
		{"kafka bad topic", "actions:\n  x:\n    connector: kafka\n    topic: a/b\n",
			[]string{`field "topic": invalid Kafka topic name "a/b"`}},
		{"empty action name", "actions:\n  \"\":\n    connector: noop\n",
			[]string{`onceflight.yaml:2:3: action name must not be empty`}},
		{"field of another connector", "actions:\n  x:\n    connector: noop\n    url: http://a/\n    topic: t\n",
			[]string{`action "x": field "url": only valid for connector http`, `field "topic": only valid for connector kafka`}},
		{"effects_file on http", "actions:\n  x:\n    connector: http\n    url: http://a/\n    effects_file: e.log\n",
			[]string{`field "effects_file": only valid for connector noop`}},
		{"bool type", "actions:\n  x:\n    connector: noop\n    idempotent_by_key: yes please\n",
			[]string{`field "idempotent_by_key": must be true or false`}},
		{"list type", "actions:\n  x:\n    connector: noop\n    unique_by: order_id\n",
			[]string{`field "unique_by": must be a list of strings`}},
		{"list item type", "actions:\n  x:\n    connector: noop\n    allowed_sources: [{a: b}]\n",
			[]string{`field "allowed_sources": items must be strings`}},
		{"duplicate unique_by", "actions:\n  x:\n    connector: noop\n    unique_by: [a, a]\n",
			[]string{`field "unique_by": field "a" listed twice`}},
		{"unique_by empty path step", "actions:\n  x:\n    connector: noop\n    unique_by: [order..id]\n",
			[]string{`field "unique_by": field "order..id" has an empty path step`}},
		{"redact empty path step", "actions:\n  x:\n    connector: noop\n    redact: [customer.]\n",
			[]string{`field "redact": field "customer." has an empty path step`}},
		{"duplicate redact", "actions:\n  x:\n    connector: noop\n    redact: [iban, iban]\n",
			[]string{`field "redact": field "iban" listed twice`}},
		{"redact type", "actions:\n  x:\n    connector: noop\n    redact: iban\n",
			[]string{`field "redact": must be a list of strings`}},
		{"empty source pattern", "actions:\n  x:\n    connector: noop\n    allowed_sources: [\"\"]\n",
			[]string{`field "allowed_sources": patterns must not be empty`}},
		{"action not a mapping", "actions:\n  x: http\n",
			[]string{`2:6: action "x": must be a mapping`}},
		{"actions missing", "reconcile:\n  every: 1m\n",
			[]string{`onceflight.yaml: field "actions": required`}},
		{"empty file", "",
			[]string{`onceflight.yaml: field "actions": required`}},
		{"actions empty", "actions: {}\n",
			[]string{`field "actions": must declare at least one action`}},
		{"actions null", "actions:\n",
			[]string{`field "actions": must declare at least one action`}},
		{"actions a list", "actions: [a]\n",
			[]string{`field "actions": must be a mapping`}},
		{"top level scalar", "hello\n",
			[]string{`must be a mapping with an "actions" key`}},
		{"unknown top-level field", minimal + "dedupe: 7d\n",
			[]string{`onceflight.yaml:4:1: unknown field "dedupe"`}},
		{"reconcile unknown", minimal + "reconcile:\n  each: 1m\n",
			[]string{`5:3: unknown field "reconcile.each"`}},
		{"reconcile bad", minimal + "reconcile:\n  every: soon\n  for: -1h\n",
			[]string{`field "reconcile.every": invalid duration "soon"`, `field "reconcile.for": must be positive`}},
		{"retention invalid", minimal + "dedupe_retention: 7 days\n",
			[]string{`4:19: field "dedupe_retention": invalid duration "7 days"`}},
		{"retention negative", minimal + "dedupe_retention: -7d\n",
			[]string{`field "dedupe_retention": invalid duration "-7d"`}},
		{"key memory shorter", minimal + "key_memory: 1d\n",
			[]string{`field "key_memory": 1d is shorter than dedupe_retention 7d`}},
		{"syntax error", "actions:\n  x: [1\n",
			[]string{`onceflight.yaml:2:6:`}},
		{"duplicate action", "actions:\n  x: {connector: noop}\n  x: {connector: noop}\n",
			[]string{`onceflight.yaml:3:3:`, `already defined`}},
		{"two documents", minimal + "---\n" + minimal,
			[]string{`single YAML document`}},
		{"errors from several actions collected", "actions:\n  a:\n    connector: http\n  b:\n    connector: kafka\n  c:\n    connector: noop\n    max_attempts: 0\n",
			[]string{`action "a": field "url": required`, `action "b": field "topic": required`, `action "c": field "max_attempts"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse(filepath.Join("testdata", "onceflight.yaml"), []byte(c.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("Parse returned a config with an error")
			}
			msg := strings.ReplaceAll(err.Error(), filepath.Join("testdata", "onceflight.yaml"), "onceflight.yaml")
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
				}
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("error is not a *config.Error: %T", err)
			}
		})
	}
}

// TestMergeBomb checks that nested merge keys, which expand exponentially
// through aliases, are cut off instead of hanging start-up.
func TestMergeBomb(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("x-0: &a0 {connector: noop}\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "x-%d: &a%d {<<: [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]}\n")
	}
	b.WriteString("actions:\n  x: *a8\n")
	start := time.Now()
	_, err := Parse("c.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "merge keys expand to more than") {
		t.Errorf("Parse = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Parse took %v", d)
	}
}

func TestErrorFormat(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{File: "onceflight.yaml", Action: "payments.refund", Field: "url", Msg: "required for connector http"},
			`onceflight.yaml: action "payments.refund": field "url": required for connector http`},
		{Error{File: "onceflight.yaml", Line: 7, Column: 5, Action: "x", Msg: `unknown field "urll"`},
			`onceflight.yaml:7:5: action "x": unknown field "urll"`},
		{Error{Field: "actions", Msg: "required"}, `config: field "actions": required`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("onceflight.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Actions["a"]
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"Name", a.Name, "a"},
		{"Timeout", a.Timeout, 2 * time.Second},
		{"MaxAttempts", a.MaxAttempts, 5},
		{"ConfirmTimeout", a.ConfirmTimeout, 30 * time.Second},
		{"OnDuplicate", a.OnDuplicate, "reject"},
		{"IdempotentByKey", a.IdempotentByKey, false},
		{"Reconcile.Every", cfg.Reconcile.Every, 5 * time.Minute},
		{"Reconcile.For", cfg.Reconcile.For, 24 * time.Hour},
		{"DedupeRetention", cfg.DedupeRetention, 7 * 24 * time.Hour},
		{"KeyMemory", cfg.KeyMemory, 90 * 24 * time.Hour},
		{"Path", cfg.Path, "onceflight.yaml"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if err := a.ValidateData(json.RawMessage(`"anything"`)); err != nil {
		t.Errorf("ValidateData without schema: %v", err)
	}
	if !a.SourceAllowed("urn:anyone") {
		t.Errorf("SourceAllowed without allowed_sources = false")
	}
}

func TestLoadExample(t *testing.T) {
	t.Parallel()
	cfg, err := Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Actions) != 3 {
		t.Fatalf("actions = %d, want 3", len(cfg.Actions))
	}
	r := cfg.Actions["payments.refund"]
	if r.Connector != ConnectorHTTP || r.URL != "http://127.0.0.1:8081/refunds" ||
		r.ConfirmURL != "http://127.0.0.1:8081/refunds/{key}" || r.Timeout != 2*time.Second ||
		r.MaxAttempts != 5 || r.ConfirmTimeout != 30*time.Second || r.IdempotentByKey ||
		r.Schema != "refund.schema.json" || strings.Join(r.UniqueBy, ",") != "order_id" ||
		r.OnDuplicate != OnDuplicateHold || len(r.AllowedSources) != 2 || strings.Join(r.Redact, ",") != "customer.name,iban" {
		t.Errorf("payments.refund = %+v", r)
	}
	k := cfg.Actions["customers.notify"]
	if k.Connector != ConnectorKafka || k.Topic != "customer.notifications" || k.Timeout != 5*time.Second {
		t.Errorf("customers.notify = %+v", k)
	}
	n, ok := cfg.Action("demo.touch")
	if !ok || n.Connector != ConnectorNoop || n.EffectsFile != filepath.Join("testdata", "demo-effects.log") {
		t.Errorf("demo.touch = %+v", n)
	}
	if cfg.Reconcile != (ReconcileConfig{Every: 5 * time.Minute, For: 24 * time.Hour}) ||
		cfg.DedupeRetention != 7*24*time.Hour || cfg.KeyMemory != 90*24*time.Hour {
		t.Errorf("config = %+v", cfg)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestExplicitValues(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("c.yaml", []byte(`
x-common: &common
  connector: http
  url: https://api.example/v1/do
  timeout: 750ms
actions:
  a:
    <<: *common
    max_attempts: 1
    confirm_timeout: 1m30s
    idempotent_by_key: true
  "2024":
    connector: kafka
    topic: 2024
reconcile: {every: 30s, for: 2d}
dedupe_retention: 1d12h
key_memory: 36h
`))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Actions["a"]
	if a.Connector != "http" || a.URL != "https://api.example/v1/do" || a.Timeout != 750*time.Millisecond ||
		a.MaxAttempts != 1 || a.ConfirmTimeout != 90*time.Second || !a.IdempotentByKey {
		t.Errorf("a = %+v", a)
	}
	if b := cfg.Actions["2024"]; b == nil || b.Topic != "2024" {
		t.Errorf("2024 = %+v", b)
	}
	if cfg.Reconcile.Every != 30*time.Second || cfg.Reconcile.For != 48*time.Hour ||
		cfg.DedupeRetention != 36*time.Hour || cfg.KeyMemory != 36*time.Hour {
		t.Errorf("cfg = %+v", cfg)
	}
}

func TestSystems(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("c.yaml", []byte(`
systems:
  payments:
    max_concurrent: 8
    rate: 12.5
    burst: 3
    breaker: {after: 2, probe_every: 500ms}
    http: {max_idle_conns: 64, idle_timeout: 30s, max_conns: 128, dial_timeout: 2s, tls_handshake_timeout: 3s, keep_alive: 15s, client: net/http}
  mail: {}
actions:
  payments.refund: {connector: noop, system: payments, give_up_after: 10m}
  payments.charge: {connector: noop, system: payments}
  notify: {connector: noop, system: mail}
  ping: {connector: noop}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := System{Name: "payments", MaxConcurrent: 8, Rate: 12.5, Burst: 3, BreakerAfter: 2, ProbeEvery: 500 * time.Millisecond,
		HTTP: httpconn.Transport{MaxIdleConns: 64, IdleTimeout: 30 * time.Second, MaxConns: 128, DialTimeout: 2 * time.Second,
			TLSHandshakeTimeout: 3 * time.Second, KeepAlive: 15 * time.Second, Client: httpconn.ClientNetHTTP}}
	if got := cfg.Systems["payments"]; got == nil || *got != want {
		t.Errorf("payments = %+v", got)
	}
	if got := cfg.Systems["mail"]; got == nil || *got != (System{Name: "mail"}) {
		t.Errorf("mail = %+v", got)
	}
	if a := cfg.Actions["payments.refund"]; a.System != "payments" || a.GiveUpAfter != 10*time.Minute {
		t.Errorf("payments.refund = %+v", a)
	}
	if a := cfg.Actions["ping"]; a.System != "" || a.GiveUpAfter != effect.DefaultGiveUpAfter {
		t.Errorf("ping = %+v", a)
	}
}

func TestSchemaValidation(t *testing.T) {
	t.Parallel()
	cfg, err := Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Actions["payments.refund"]
	for _, c := range []struct {
		data string
		ok   bool
	}{
		{`{"order_id":"order-1042","amount_cents":500}`, true},
		{`{"order_id":"order-1042","amount_cents":500,"reason":"damaged"}`, true},
		{`{"order_id":"order-1042","amount_cents":12345678901234567890123}`, true},
		{`{"order_id":"order-1042"}`, false},
		{`{"order_id":"order-1042","amount_cents":0}`, false},
		{`{"order_id":"order-1042","amount_cents":1.5}`, false},
		{`{"order_id":"order-1042","amount_cents":5,"extra":1}`, false},
		{`[]`, false},
		{`{"order_id":`, false},
		{``, false}, // validated as {}: required properties missing
		{`  `, false},
	} {
		err := a.ValidateData(json.RawMessage(c.data))
		if (err == nil) != c.ok {
			t.Errorf("ValidateData(%s) = %v, want ok=%v", c.data, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), `action "payments.refund"`) {
			t.Errorf("error does not name the action: %v", err)
		}
	}
	if err := a.ValidateData(nil); err == nil {
		t.Errorf("ValidateData(nil) accepted data the schema requires")
	}
}

func TestSchemaRelativeToConfigDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "schemas"), 0o755); err != nil {
		t.Fatal(err)
	}
	// $ref to a sibling file must resolve too.
	writeFile(t, filepath.Join(dir, "schemas", "id.json"), `{"type":"string","pattern":"^o-"}`)
	writeFile(t, filepath.Join(dir, "schemas", "a.json"), `{"type":"object","properties":{"id":{"$ref":"id.json"}}}`)
	writeFile(t, filepath.Join(dir, "c.yaml"), "actions:\n  a:\n    connector: noop\n    schema: schemas/a.json\n")
	cfg, err := Load(filepath.Join(dir, "c.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Actions["a"]
	if err := a.ValidateData(json.RawMessage(`{"id":"o-1"}`)); err != nil {
		t.Errorf("valid data: %v", err)
	}
	if err := a.ValidateData(json.RawMessage(`{"id":"x-1"}`)); err == nil {
		t.Errorf("invalid data accepted")
	}
	if err := a.ValidateData(nil); err != nil {
		t.Errorf("nil data (as {}): %v", err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSourceAllowed(t *testing.T) {
	t.Parallel()
	a := &Action{AllowedSources: []string{"https://shop.example/*", "urn:backoffice", "*.internal/*/v1"}}
	for _, c := range []struct {
		source string
		want   bool
	}{
		{"https://shop.example/", true},
		{"https://shop.example/checkout/eu", true},
		{"https://shop.example", false},
		{"https://shop.example.evil/x", false},
		{"http://shop.example/x", false},
		{"urn:backoffice", true},
		{"urn:backoffice2", false},
		{"billing.internal/a/b/v1", true},
		{"billing.internal/a/v2", false},
		{"", false},
	} {
		if got := a.SourceAllowed(c.source); got != c.want {
			t.Errorf("SourceAllowed(%q) = %v, want %v", c.source, got, c.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "anything/at/all", true}, {"a*", "a", true},
		{"*a", "ba", true}, {"*a", "ab", false}, {"a*b*c", "abc", true},
		{"a*b*c", "aXbYbZc", true}, {"a*b*c", "acb", false}, {"ab*ba", "aba", false},
		{"**", "x", true}, {"x", "x", true}, {"x", "y", false},
	} {
		if got := globMatch(c.p, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(minimal))
	f.Add([]byte("actions:\n  x:\n    connector: http\n    urll: x\n    timeout: 2 seconds\n"))
	f.Add([]byte("x-a: &a {connector: noop}\nactions:\n  x:\n    <<: [*a, *a]\n    unique_by: *a\n"))
	f.Add([]byte("actions: {a: {connector: kafka, topic: t}}\nreconcile: {every: 1d1h, for: 99999999999999d}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("x-a: &a {connector: http}\nactions:\n  a: *a\n  x-b: &a {connector: noop}\n  b: {<<: *a, max_attempts: 2}\n"))
	dir := f.TempDir() // relative schema paths resolve to nothing real
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(filepath.Join(dir, "c.yaml"), data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse returned cfg=%v err=%v", cfg, err)
		}
		if err != nil {
			// Every problem is an *Error, and the same file gives the
			// same report: no map order leaks into it.
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				if _, ok := e.(*Error); !ok {
					t.Fatalf("error %T is not an *Error: %v", e, e)
				}
			}
			if _, again := Parse(filepath.Join(dir, "c.yaml"), data); again.Error() != err.Error() {
				t.Fatalf("two reports of one file:\n%v\n%v", err, again)
			}
			return
		}
		for name, a := range cfg.Actions {
			if name == "" || a.Name != name || a.MaxAttempts < 1 || a.Timeout <= 0 || a.ConfirmTimeout <= 0 {
				t.Fatalf("invalid action accepted: %+v", a)
			}
			_ = a.ValidateData(nil)
			_ = a.SourceAllowed("urn:x")
		}
		if cfg.Reconcile.Every <= 0 || cfg.Reconcile.For <= 0 || cfg.KeyMemory < cfg.DedupeRetention {
			t.Fatalf("invalid config accepted: %+v", cfg)
		}
	})
}

// TestAliasNamesPrecedingAnchor checks YAML's rule that an alias refers to
// the most recent anchor of its name before it, not to the last one in the
// file, and that an alias inside its own anchor names nothing.
func TestAliasNamesPrecedingAnchor(t *testing.T) {
	t.Parallel()
	cfg, err := ParseWith("c.yaml", []byte("actions:\n  x:\n    connector: ledger\n    settings: {a: &v 1, b: *v, c: &v 2, d: *v}\n"), []string{"ledger"})
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Actions["x"].Settings; s["b"] != "1" || s["d"] != "2" {
		t.Errorf("settings = %v, want b=1 d=2", s)
	}
	cfg, err = Parse("c.yaml", []byte("x-a: &a {connector: http}\nactions:\n  first: *a\n  x-redefined: &a {connector: noop}\n  second: *a\n"))
	if err == nil {
		t.Fatalf("Parse accepted an http action without url: %+v", cfg)
	}
	if msg := err.Error(); !strings.Contains(msg, `action "first": field "url": required`) || strings.Contains(msg, `action "second"`) {
		t.Errorf("error = %v, want only first (http) to miss its url", err)
	}
	if _, err := Parse("c.yaml", []byte("x-a: &a [*a]\nactions:\n  x: {connector: noop, unique_by: *a}\n")); err == nil ||
		!strings.Contains(err.Error(), `field "unique_by": items must be strings`) {
		t.Errorf("self-referencing anchor: %v", err)
	}
}

// TestEveryErrorReported checks that a problem does not hide the next,
// whatever its kind: unknown keys at every level and ill-typed values.
func TestEveryErrorReported(t *testing.T) {
	t.Parallel()
	_, err := Parse("c.yaml", []byte(`actions:
  x:
    connector: kafka
    topic: t
    max_attempts: 1.5
    timeout: [1s]
    idempotent_by_key: "true"
    kafka: {brokers: a:1, extra: 1}
  y:
    connector: noop
    urll: x
reconcile: {every: 1d, each: 1m, for: 1}
dedupe_retention: {a: 1}
`))
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	for _, w := range []string{
		`c.yaml:5:19: action "x": field "max_attempts": must be an integer`,
		`c.yaml:6:14: action "x": field "timeout": must be a duration such as "30s"`,
		`c.yaml:7:24: action "x": field "idempotent_by_key": must be true or false`,
		`c.yaml:8:22: action "x": field "kafka.brokers": must be a list of strings`,
		`c.yaml:8:27: action "x": unknown field "kafka.extra"`,
		`c.yaml:11:5: action "y": unknown field "urll"`,
		`c.yaml:12:24: unknown field "reconcile.each"`,
		`c.yaml:12:39: field "reconcile.for": invalid duration "1": a unit is required`,
		`c.yaml:13:19: field "dedupe_retention": must be a duration`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
		}
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 9 {
		t.Errorf("%d errors, want 9:\n%v", n, err)
	}
}

// TestTagsMatchStrictDecoder checks that the struct tags are goccy's own:
// on a valid file, goccy's strict decoder fills the same fileDoc as ours.
func TestTagsMatchStrictDecoder(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"example.yaml", "../../../deploy/onceflight.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var theirs fileDoc
		if err := yaml.UnmarshalWithOptions(data, &theirs, yaml.Strict(), yaml.AllowFieldPrefixes("x-")); err != nil {
			t.Fatalf("%s: goccy strict: %v", name, err)
		}
		p := &loader{decoder: decoder{index: map[loc]written{}, bad: map[loc]bool{}}}
		body, _ := p.document(data)
		p.aliases = linkAliases(body)
		var ours fileDoc
		p.decode(body, reflect.ValueOf(&ours).Elem(), nil)
		if len(p.errs) > 0 || !reflect.DeepEqual(ours, theirs) {
			t.Errorf("%s: ours %+v (%v)\ngoccy %+v", name, ours, p.errs, theirs)
		}
	}
}

// TestAliasBombs checks the other shapes of exponential aliases: nested
// merges are cut off by depth, and an alias to nested lists is refused
// item by item without being expanded.
func TestAliasBombs(t *testing.T) {
	t.Parallel()
	var deep strings.Builder
	deep.WriteString("x-0: &m0 {connector: noop}\n")
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&deep, "x-%d: &m%d {<<: *m%d}\n", i, i, i-1)
	}
	deep.WriteString("actions:\n  x: *m12\n")
	var lists strings.Builder
	lists.WriteString("x-0: &l0 [a, a, a, a, a, a, a, a, a, a]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&lists, "x-%d: &l%d [*l%d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d, *l%[3]d]\n", i, i, i-1)
	}
	lists.WriteString("actions:\n  x: {connector: noop, unique_by: *l8, allowed_sources: *l8}\n")
	for _, c := range []struct{ name, yaml, want string }{
		{"deep merges", deep.String(), "merge keys nested too deeply"},
		{"nested lists", lists.String(), `field "unique_by": items must be strings`},
	} {
		start := time.Now()
		_, err := Parse("c.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Parse = %v", c.name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: Parse took %v", c.name, d)
		}
	}
}
