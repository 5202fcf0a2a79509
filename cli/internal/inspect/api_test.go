package inspect

import (
	"bytes"
	"strings"
	"testing"
)

// TestDescribeRealAPI: a real API's call and lookup are described with
// credentials as references, the confirmation rule in words, the answers
// rejected_when adds, and the guarantee in the API's terms; an action of
// Onceflight's own protocol gets none of it.
func TestDescribeRealAPI(t *testing.T) {
	t.Setenv("INSPECT_KEY", "sk_inspect_secret_value")
	a := only(t, `actions:
  payments.refund:
    connector: http
    url: https://api.example/v1/refunds
    body: form
    idempotent_by_key: true
    unique_by: [charge]
    headers:
      Authorization: "Bearer ${env:INSPECT_KEY}"
      Stripe-Version: "2024-06-20"
    rejected_when: 'body.status == "failed"'
    confirm:
      url: https://api.example/v1/refunds?idempotency_key={key}
      found: "status == 200 && size(body.data) > 0"
      not_found: "status == 200 && size(body.data) == 0"
`)
	r := a.Endpoints.Request
	if r == nil || r.Method != "POST" || !strings.HasPrefix(r.Body, "form-encoded") ||
		strings.Join(r.Headers, "|") != "Authorization: from ${env:INSPECT_KEY}|Stripe-Version: 2024-06-20" {
		t.Fatalf("request = %+v", r)
	}
	if !strings.Contains(a.Endpoints.ConfirmRule, "found when status == 200 && size(body.data) > 0; not found when status == 200 && size(body.data) == 0; anything else") ||
		a.Endpoints.Confirm != "GET https://api.example/v1/refunds?idempotency_key={key}" {
		t.Errorf("confirm = %q, rule = %q", a.Endpoints.Confirm, a.Endpoints.ConfirmRule)
	}
	st := steps(a)
	if st[`2xx where rejected_when holds (body.status == "failed")`] != "rejected→failed" || st["2xx where rejected_when cannot be evaluated"] != "ambiguous→confirm" {
		t.Errorf("answers = %v", st)
	}
	if g := a.Guarantees[2]; !strings.HasPrefix(g.Why, "G3 holds: the API deduplicates by Idempotency-Key and can be looked up by it") {
		t.Errorf("G3 = %+v", g)
	}
	var out bytes.Buffer
	if err := WriteText(&out, []Action{a}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "sk_inspect_secret_value") || !strings.Contains(out.String(), "confirm rule:") {
		t.Errorf("text:\n%s", out.String())
	}

	plain := only(t, "actions:\n  x:\n    connector: http\n    url: http://x/r\n    confirm_url: http://x/r/{key}\n")
	if plain.Endpoints.Request != nil || plain.Endpoints.ConfirmRule != "" {
		t.Errorf("own protocol described as a real API: %+v", plain.Endpoints)
	}
}

// TestCredentialsInClearTextWarned: credentials bound for an http:// URL
// that is not this machine are warned about; https, loopback and an action
// without credentials are not; OAuth2's token URL counts too, and the
// OAuth2 answers join the table.
func TestCredentialsInClearTextWarned(t *testing.T) {
	t.Setenv("INSPECT_KEY", "k")
	const clear = "credentials are sent in clear text"
	for _, c := range []struct {
		name, block string
		warned      bool
	}{
		{"bearer over http", "    url: http://api.partner.example/v1/x\n    headers: {Authorization: \"Bearer ${env:INSPECT_KEY}\"}\n", true},
		{"lookup over http", "    url: https://api.partner.example/v1/x\n    headers: {X-Api-Key: \"${env:INSPECT_KEY}\"}\n    confirm: {url: \"http://api.partner.example/v1/x/{key}\"}\n", true},
		{"oauth2 token over http", "    url: https://api.partner.example/v1/x\n    oauth2: {token_url: \"http://auth.partner.example/token\", client_id: c, client_secret: \"${env:INSPECT_KEY}\"}\n", true},
		{"https", "    url: https://api.partner.example/v1/x\n    headers: {Authorization: \"Bearer ${env:INSPECT_KEY}\"}\n", false},
		{"loopback", "    url: http://127.0.0.1:8080/v1/x\n    basic_auth: {username: u, password: \"${env:INSPECT_KEY}\"}\n", false},
		{"no credentials", "    url: http://api.partner.example/v1/x\n    headers: {Stripe-Version: \"2024-06-20\"}\n", false},
	} {
		a := only(t, "actions:\n  x.send:\n    connector: http\n"+c.block)
		got := strings.Contains(strings.Join(a.Warnings, "|"), clear)
		if got != c.warned {
			t.Errorf("%s: warnings %q, want clear-text warning %v", c.name, a.Warnings, c.warned)
		}
		if c.name == "oauth2 token over http" {
			st := steps(a)
			if st["OAuth2 token refused (4xx from token_url, not 408, 425, 429)"] != "rejected→failed" ||
				!strings.HasPrefix(st["OAuth2 token not fetched (token_url unreachable, busy, 5xx)"], "unavailable") {
				t.Errorf("answers = %v", st)
			}
		}
	}
}

// TestDescribeStatuses: the codes an action reclassifies come first in its
// table, as Execute classifies them, and the default 503 row goes when 503
// is listed.
func TestDescribeStatuses(t *testing.T) {
	a := only(t, `actions:
  pay:
    connector: http
    url: https://api.example/v1/refunds
    confirm_url: https://api.example/v1/refunds/{key}
    idempotent_by_key: true
    statuses:
      ambiguous: [503]
      not_done: [409]
`)
	if len(a.Answers) < 2 || a.Answers[0].Answer != "HTTP 503 (statuses.ambiguous)" || a.Answers[1].Answer != "HTTP 409 (statuses.not_done)" {
		t.Fatalf("answers = %+v", a.Answers)
	}
	st := steps(a)
	if st["HTTP 503 (statuses.ambiguous)"] != "ambiguous→confirm" || st["HTTP 409 (statuses.not_done)"] != "unavailable→retry" {
		t.Errorf("answers = %v", st)
	}
	for _, r := range a.Answers {
		if r.Answer == "HTTP 409 (statuses.not_done)" && !strings.HasSuffix(r.Then, "then unresolved (ambiguous): the earlier request may yet take effect") {
			t.Errorf("a not_done code's bound: %q, want unresolved (Perform: the earlier request may yet take effect)", r.Then)
		}
	}
	if _, ok := st["HTTP 503"]; ok {
		t.Errorf("the protocol's 503 row is still there beside the action's own: %v", st)
	}
}
