package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/schemas"
)

const (
	iban     = "DE89370400440532013000"
	customer = "Jane Roe-Müller"
	token    = "reader-0123456789abcdef"
)

// openWithRecord is a store holding one succeeded refund whose data,
// result and error quote a customer's name and IBAN.
func openWithRecord(t *testing.T) *dedupe.Store {
	t.Helper()
	store, err := dedupe.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	now := time.Now().UTC()
	b := store.NewBatch()
	b.PutRecord(schemas.Record{IdempotencyKey: "refund-1", Entity: "order-1", Action: "payments.refund", Status: schemas.StatusSucceeded, FinishedAt: &now,
		Command: schemas.CommandRef{ID: "c1"},
		Data:    json.RawMessage(`{"amount":25,"customer":{"name":"` + customer + `","tier":"gold"},"iban":"` + iban + `","lines":[{"iban":"` + iban + `"},{"sku":"a"}]}`),
		Result:  json.RawMessage(`{"http_status":201,"body":{"refund_id":"re_77","to":"` + iban + `"}}`),
		Error:   &schemas.Error{Code: "x", Message: "PSP said: account " + iban + " ok"}})
	b.PutRecord(schemas.Record{IdempotencyKey: "ping-1", Entity: "order-1", Action: "noop.ping", Status: schemas.StatusSucceeded, FinishedAt: &now,
		Data: json.RawMessage(`{"iban":"` + iban + `"}`)})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	return store
}

func do(t *testing.T, url, bearer string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestRecordsNeedAuthentication: with an Authenticator every /v1/ path
// answers 401 without a valid token and never the record; health,
// readiness and metrics stay open; every answer carries the security
// headers and record answers are not cached.
func TestRecordsNeedAuthentication(t *testing.T) {
	store := openWithRecord(t)
	auth, err := httpauth.New(httpauth.WithTokens(httpauth.Token{Name: "ops", Role: httpauth.RoleReader, Value: token}))
	if err != nil {
		t.Fatal(err)
	}
	ready := readiness(true)
	srv := httptest.NewServer(Handler(&ready, store, prometheus.NewRegistry(), WithActions(nil), WithAuth(auth)))
	defer srv.Close()

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if resp, body := do(t, srv.URL+path, ""); resp.StatusCode != 200 {
			t.Errorf("GET %s without credentials: %d %s", path, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/v1/executions/refund-1", "/v1/executions/refund-1?entity=order-1", "/v1/executions?status=succeeded",
		"/v1/entities/order-1", "/v1/actions", "/v1/nothing-here"} {
		for _, bearer := range []string{"", token + "x", "ops"} {
			resp, body := do(t, srv.URL+path, bearer)
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") ||
				strings.Contains(body, "refund-1\"") || strings.Contains(body, "amount") {
				t.Errorf("GET %s with %q: %d %q %s", path, bearer, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
			}
		}
	}
	resp, body := do(t, srv.URL+"/v1/executions/refund-1", token)
	if resp.StatusCode != 200 || !strings.Contains(body, `"amount":25`) {
		t.Fatalf("with the token: %d %s", resp.StatusCode, body)
	}
	h := resp.Header
	if h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.HasPrefix(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("record answer headers: %v", h)
	}
	if resp, _ := do(t, srv.URL+"/v1/nothing-here", token); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown path with the token: %d", resp.StatusCode)
	}
	resp, _ = do(t, srv.URL+"/metrics", "")
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") == "no-store" {
		t.Errorf("metrics headers: %v", resp.Header)
	}
}

// TestHealthHandler: the --metrics-http listener has no record endpoint
// at all, with or without credentials.
func TestHealthHandler(t *testing.T) {
	ready := readiness(false)
	srv := httptest.NewServer(HealthHandler(&ready, prometheus.NewRegistry()))
	defer srv.Close()
	for path, code := range map[string]int{"/healthz": 200, "/readyz": 503, "/metrics": 200, "/v1/executions/refund-1": 404, "/v1/actions": 404} {
		if resp, body := do(t, srv.URL+path, token); resp.StatusCode != code {
			t.Errorf("GET %s: %d %s, want %d", path, resp.StatusCode, body, code)
		}
	}
}

// TestRedaction: the fields an action's redact list names are
// "[redacted]" in every record answer, also where the result or the error
// message quote them; other actions' records and other fields are whole.
func TestRedaction(t *testing.T) {
	store := openWithRecord(t)
	paths := map[string][]string{"payments.refund": {"customer.name", "iban", "lines.iban", "missing.field"}}
	ready := readiness(true)
	srv := httptest.NewServer(Handler(&ready, store, prometheus.NewRegistry(), WithRedaction(func(a string) []string { return paths[a] })))
	defer srv.Close()

	for _, path := range []string{"/v1/executions/refund-1", "/v1/executions/refund-1?entity=order-1", "/v1/executions?status=succeeded"} {
		_, body := do(t, srv.URL+path, "")
		var got struct{ Executions []schemas.Record }
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("GET %s: %v %s", path, err, body)
		}
		for _, rec := range got.Executions {
			s, _ := json.Marshal(rec)
			switch rec.Action {
			case "payments.refund":
				if strings.Contains(string(s), iban) || strings.Contains(string(s), customer) {
					t.Errorf("GET %s: %s", path, s)
				}
				var data struct {
					Amount   int
					Customer struct{ Name, Tier string }
					IBAN     string
					Lines    []map[string]string
				}
				if err := json.Unmarshal(rec.Data, &data); err != nil || data.Amount != 25 || data.Customer.Name != Redacted ||
					data.Customer.Tier != "gold" || data.IBAN != Redacted || data.Lines[0]["iban"] != Redacted || data.Lines[1]["sku"] != "a" {
					t.Errorf("GET %s: data %s (%v)", path, rec.Data, err)
				}
				if !strings.Contains(string(rec.Result), `"refund_id":"re_77"`) || !strings.Contains(rec.Error.Message, "account [redacted] ok") {
					t.Errorf("GET %s: result %s, error %q", path, rec.Result, rec.Error.Message)
				}
			case "noop.ping":
				if !strings.Contains(string(rec.Data), iban) {
					t.Errorf("GET %s: noop.ping has no redact list, but its data is %s", path, rec.Data)
				}
			}
		}
	}
}

func TestRedactRecord(t *testing.T) {
	rec := schemas.Record{Data: json.RawMessage(`{"a":1`)}
	if got := RedactRecord(rec, []string{"a"}); string(got.Data) != `"[redacted]"` {
		t.Errorf("undecodable data: %s", got.Data)
	}
	rec = schemas.Record{Data: json.RawMessage(`{"n":12345678901234567890,"b":"x"}`)}
	if got := RedactRecord(rec, nil); string(got.Data) != string(rec.Data) {
		t.Errorf("no paths: %s", got.Data)
	}
	if got := RedactRecord(rec, []string{"b"}); string(got.Data) != `{"b":"[redacted]","n":12345678901234567890}` {
		t.Errorf("big number: %s", got.Data)
	}
	if got := RedactRecord(schemas.Record{}, []string{"b"}); got.Data != nil {
		t.Errorf("no data: %s", got.Data)
	}
	// An evidence detail that echoes a hidden value is scrubbed; the
	// record given is not changed.
	rec = schemas.Record{Data: json.RawMessage(`{"card":"4111-1111"}`),
		Evidence: []schemas.Evidence{{Kind: schemas.EvidenceAttempt, Attempt: 1, Answer: schemas.AnswerRejected, Detail: "HTTP 422: card 4111-1111 declined"}}}
	rec.Resolution = &schemas.Resolution{By: "alice", As: schemas.StatusFailed, Reason: "PSP has no charge on 4111-1111"}
	rec.Release = &schemas.Resolution{By: "bob", Reason: "card 4111-1111 may be charged again"}
	got := RedactRecord(rec, []string{"card"})
	if d := got.Evidence[0].Detail; strings.Contains(d, "4111-1111") || rec.Evidence[0].Detail != "HTTP 422: card 4111-1111 declined" {
		t.Errorf("evidence detail %q (original now %q)", d, rec.Evidence[0].Detail)
	}
	if got.Resolution.Reason != "PSP has no charge on [redacted]" || got.Release.Reason != "card [redacted] may be charged again" ||
		got.Resolution.By != "alice" || rec.Resolution.Reason != "PSP has no charge on 4111-1111" {
		t.Errorf("reasons: resolution %+v, release %+v (original now %q)", got.Resolution, got.Release, rec.Resolution.Reason)
	}
}
