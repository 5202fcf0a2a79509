package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/dedupe"
)

func TestActions(t *testing.T) {
	cfg, err := config.ParseWith("t.yaml", []byte("actions:\n  payments.refund:\n    connector: http\n    url: http://x/r\n  noop.ping:\n    connector: noop\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := inspect.Describe(cfg, 4096)
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ready := readiness(true)
	srv := httptest.NewServer(Handler(&ready, store, prometheus.NewRegistry(), WithActions(acts)))
	defer srv.Close()

	get := func(path string, code int, v any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != code {
			t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, code)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	var all struct{ Actions []inspect.Action }
	get("/v1/actions", http.StatusOK, &all)
	if len(all.Actions) != 2 || all.Actions[0].Name != "noop.ping" {
		t.Errorf("actions = %+v", all.Actions)
	}
	var one inspect.Action
	get("/v1/actions/payments.refund", http.StatusOK, &one)
	if one.Connector != "http" || len(one.Warnings) == 0 || one.Limits.MaxDataBytes != 4096 {
		t.Errorf("payments.refund = %+v", one)
	}
	var e map[string]string
	get("/v1/actions/nope", http.StatusNotFound, &e)
	if e["error"] == "" {
		t.Errorf("unknown action: %v", e)
	}
}

// TestActionsHideURLCredentials: the values of credential-like query
// parameters (the actions file refuses user info in a URL) never show in the actions'
// descriptions (GET /v1/actions, the console's Actions page); the rest
// of the URL does.
func TestActionsHideURLCredentials(t *testing.T) {
	const yaml = "actions:\n  payments.refund:\n    connector: http\n" +
		"    url: https://psp.example/refunds?api_key=k-live-7781&currency=EUR\n" +
		"    confirm_url: https://psp.example/refunds/{key}?access_token=tok-55129&x=1\n"
	cfg, err := config.ParseWith("t.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := inspect.Describe(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(acts); !strings.Contains(string(b), "k-live-7781") {
		t.Fatalf("the description does not quote the URL at all, so this test proves nothing: %s", b)
	}
	pub := PublicActions(acts)
	b, _ := json.Marshal(pub)
	for _, secret := range []string{"k-live-7781", "tok-55129"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the public description shows %q: %s", secret, b)
		}
	}
	if e := pub[0].Endpoints; e.URL != "https://psp.example/refunds?api_key=[redacted]&currency=EUR" ||
		e.ConfirmURL != "https://psp.example/refunds/{key}?access_token=[redacted]&x=1" {
		t.Errorf("endpoints %+v", e)
	}
	if acts[0].Endpoints.URL == pub[0].Endpoints.URL {
		t.Errorf("the description given was changed")
	}
}
