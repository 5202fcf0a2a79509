package httpconn

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/onceflight/onceflight/connectors"
)

// TestRedactedTokensBounded: every OAuth2 access token fetched was added
// to the values every answer is scanned against, and none left: with
// tokens of an hour that is 8 760 a year, of five minutes 105 000 — each
// answer's redaction a scan per value, the executor slower by the day and
// its memory growing. A token is shown only by an answer to a request that
// carried it, so the last few are kept; the configured secrets stay.
func TestRedactedTokensBounded(t *testing.T) {
	t.Setenv("OAUTH_SECRET", "oauth-secret-1b2c")
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// expires_in within oauth2's 10s margin: every request fetches one.
		fmt.Fprintf(w, `{"access_token":"at-%04d-xyz","token_type":"Bearer","expires_in":1}`, n.Add(1))
	})
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"echo":"` + r.Header.Get("Authorization") + `"}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := New(Config{URL: srv.URL + "/api", API: API{
		OAuth2: &OAuth2{TokenURL: srv.URL + "/token", ClientID: "c", ClientSecret: "${env:OAUTH_SECRET}"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		r := c.Execute(context.Background(), connectors.Request{Action: "a", Entity: "e", Key: fmt.Sprint("k", i), Attempt: 1, Data: json.RawMessage(`{}`)})
		if r.Kind != connectors.Succeeded || string(r.Result) != `{"http_status":200,"body":{"echo":"Bearer [redacted]"}}` {
			t.Fatalf("execute %d: %+v %s", i, r, r.Result)
		}
	}
	c.shape.secrets.mu.RLock()
	defer c.shape.secrets.mu.RUnlock()
	if got := len(c.shape.secrets.mu.values); got > 1+maxRedactedTokens {
		t.Errorf("%d values redacted after 100 tokens, want the client secret and at most %d tokens", got, maxRedactedTokens)
	}
}
