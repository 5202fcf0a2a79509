package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
)

// TestRealAPIErrors: every mistake in the real-API block stops the load
// with the file, line, action and field, and never with a secret's value.
func TestRealAPIErrors(t *testing.T) {
	const secret = "sk_live_thisIsTheSecret"
	t.Setenv("CFG_TEST_KEY", secret)
	dir := t.TempDir()
	schema := filepath.Join(dir, "refund.schema.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"integer"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.pem"), []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := "actions:\n  pay:\n    connector: http\n    url: https://api.example/v1/refunds\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"template typo against the schema", "actions:\n  pay:\n    connector: http\n    url: https://api.example/v1/orders/{data.ordr_id}\n    schema: refund.schema.json\n",
			`c.yaml:4:10: action "pay": field "url": {data.ordr_id}: ordr_id is not a property of the schema (it has amount, order_id)`},
		{"unknown template field", head + "    confirm:\n      url: https://api.example/v1/refunds?k={ky}\n",
			`c.yaml:6:12: action "pay": field "confirm.url": unknown template field {ky}`},
		{"CEL syntax", head + "    confirm:\n      url: https://api.example/v1/refunds?k={key}\n      found: \"size(body.data) >\"\n",
			`c.yaml:7:14: action "pay": field "confirm.found": CEL: ERROR: <input>:1:18: Syntax error`},
		{"CEL unknown variable", head + "    rejected_when: 'bdy.status == \"failed\"'\n",
			`c.yaml:5:20: action "pay": field "rejected_when": CEL: ERROR: <input>:1:1: undeclared reference to 'bdy'`},
		{"CEL not a predicate", head + "    rejected_when: 'status + 1'\n",
			`field "rejected_when": CEL: "status + 1" is a int, want true or false`},
		{"missing env", head + "    headers:\n      Authorization: \"Bearer ${env:CFG_TEST_UNSET}\"\n",
			`c.yaml:6:22: action "pay": field "headers.Authorization": environment variable CFG_TEST_UNSET is not set`},
		{"missing file", head + "    basic_auth:\n      username: u\n      password: \"${file:nope/pass}\"\n",
			`action "pay": field "basic_auth.password": secret file: open ` + filepath.Join(dir, "nope", "pass")},
		{"unreadable certificate", head + "    tls:\n      ca_file: junk.pem\n",
			`c.yaml:6:16: action "pay": field "tls.ca_file": ` + filepath.Join(dir, "junk.pem") + ` holds no PEM certificate`},
		{"tls on a plain-http URL", "actions:\n  pay:\n    connector: http\n    url: http://api.example/v1/refunds\n    tls:\n      server_name: api.example\n",
			`c.yaml:6:18: action "pay": field "tls": url is http://, where tls settings do not apply: use https://`},
		{"secret in a body template", head + "    body: template\n    body_template: '{\"api_key\": \"${env:CFG_TEST_KEY}\"}'\n",
			`c.yaml:6:20: action "pay": field "body_template": secret references are not resolved in a body`},
		{"credential written in the file", head + "    headers:\n      Authorization: Bearer " + secret + "\n",
			`field "headers.Authorization": a credential is not written in the file`},
		{"secret in a URL", "actions:\n  pay:\n    connector: http\n    url: https://api.example/v1/refunds?key=${env:CFG_TEST_KEY}\n",
			`field "url": secrets are not allowed in a URL`},
		{"confirm_url and confirm", head + "    confirm_url: https://api.example/{key}\n    confirm:\n      url: https://api.example/{key}\n",
			`field "confirm": give confirm_url or confirm, not both`},
		{"lookup that cannot tell attempts apart", head + "    confirm:\n      url: https://api.example/v1/refunds\n",
			`field "confirm.url": has no placeholder`},
		{"search lookup with the default found", head + "    confirm:\n      url: https://api.example/v1/refunds?idempotency_key={key}\n",
			`c.yaml:6:10: action "pay": field "confirm.found": the lookup searches by a query`},
		{"only http", "actions:\n  k:\n    connector: kafka\n    topic: t\n    headers: {A: b}\n",
			`c.yaml:5:5: action "k": field "headers": only valid for connector http`},
		{"reserved header", head + "    headers:\n      Idempotency-Key: x\n",
			`field "headers.Idempotency-Key": Idempotency-Key is set by the connector`},
		{"bad body", head + "    body: xml\n", `field "body": must be json, form or template, got "xml"`},
		{"not_done without idempotent_by_key", head + "    statuses:\n      not_done: [409]\n",
			`c.yaml:6:7: action "pay": field "statuses.not_done": only with idempotent_by_key: true`},
		{"a 2xx reclassified", head + "    statuses:\n      ambiguous: [503, 201]\n",
			`c.yaml:6:18: action "pay": field "statuses.ambiguous": 201 cannot be reclassified`},
		{"a code in both lists", head + "    idempotent_by_key: true\n    statuses:\n      ambiguous: [503]\n      not_done: [503]\n",
			`c.yaml:8:17: action "pay": field "statuses.not_done": 503 is also in statuses.ambiguous`},
		{"a code that is not an integer", head + "    statuses:\n      ambiguous: [503, 5xx]\n",
			`c.yaml:6:24: action "pay": field "statuses.ambiguous": must be an integer`},
		{"codes not a list", head + "    statuses:\n      ambiguous: 503\n",
			`c.yaml:6:18: action "pay": field "statuses.ambiguous": must be a list of integers`},
		{"statuses on kafka", "actions:\n  k:\n    connector: kafka\n    topic: t\n    statuses: {ambiguous: [503]}\n",
			`c.yaml:5:5: action "k": field "statuses": only valid for connector http`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "c.yaml"), []byte(c.yaml))
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			msg := strings.ReplaceAll(err.Error(), filepath.Join(dir, "c.yaml"), "c.yaml")
			if !strings.Contains(msg, c.want) {
				t.Errorf("error:\n%s\nwant it to contain\n%s", msg, c.want)
			}
			if strings.Contains(msg, secret) && c.name != "credential written in the file" {
				t.Errorf("the error shows the secret: %s", msg)
			}
		})
	}
}

// TestRealAPIExamplesLoad: the shipped profiles load once their secrets are
// set, with relative paths resolved and the API block filled.
func TestRealAPIExamplesLoad(t *testing.T) {
	t.Setenv("PAYMENTS_API_KEY", "k")
	t.Setenv("MESSAGING_ACCOUNT", "a")
	t.Setenv("MESSAGING_TOKEN", "t")
	t.Setenv("WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	for _, name := range []string{"payments", "messaging", "webhooks"} {
		cfg, err := Load(filepath.Join("..", "..", "examples", "apis", name+".yaml"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, a := range cfg.Actions {
			if a.API.IsZero() {
				t.Errorf("%s: %s has no API", name, a.Name)
			}
		}
	}
	cfg, _ := Load(filepath.Join("..", "..", "examples", "apis", "payments.yaml"))
	a := cfg.Actions["payments.refund"]
	if a.API.Body != httpconn.BodyTemplate || a.API.ContentType != "application/x-www-form-urlencoded" || a.API.Confirm == nil || a.API.Headers["Authorization"] != "Bearer ${env:PAYMENTS_API_KEY}" {
		t.Errorf("payments.refund API = %+v", a.API)
	}
}

// TestRealAPISharedCredentials: the credentials of one external system,
// written once under an x- key and merged into each of its actions
// (docs/connectors.md#credentials), reach every action; a secret missing
// there is reported on the shared block's line for each action using it.
func TestRealAPISharedCredentials(t *testing.T) {
	const file = `x-payments: &payments
  connector: http
  headers: {X-Api-Key: "${env:SHARED_PAY_KEY}"}
  basic_auth: {username: ops, password: "${file:pay.pass}"}
actions:
  payments.refund: {<<: *payments, url: "https://api.payments.example/v1/refunds"}
  payments.payout: {<<: *payments, url: "https://api.payments.example/v1/payouts"}
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pay.pass"), []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SHARED_PAY_KEY", "k")
	cfg, err := Parse(filepath.Join(dir, "c.yaml"), []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"payments.refund", "payments.payout"} {
		a := cfg.Actions[name]
		if a == nil || a.API.Headers["X-Api-Key"] != "${env:SHARED_PAY_KEY}" || a.API.BasicAuth == nil ||
			a.API.BasicAuth.Password != "${file:"+filepath.Join(dir, "pay.pass")+"}" {
			t.Errorf("%s: %+v", name, a)
		}
	}
	os.Unsetenv("SHARED_PAY_KEY")
	_, err = Parse(filepath.Join(dir, "c.yaml"), []byte(file))
	for _, name := range []string{"payments.refund", "payments.payout"} {
		want := `c.yaml:3:24: action "` + name + `": field "headers.X-Api-Key": environment variable SHARED_PAY_KEY is not set`
		if err == nil || !strings.Contains(strings.ReplaceAll(err.Error(), filepath.Join(dir, "c.yaml"), "c.yaml"), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}
