package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/onceflight/onceflight/cli/internal/openapitest"
)

// TestOpenAPICheckpoints: /checkpoints is served by serve itself (trust.go),
// outside the api package whose test checks the other endpoints, so its
// answer is checked against openapi.json here.
func TestOpenAPICheckpoints(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for _, cps := range []fixedCheckpoints{{}, {0: []byte("note-0\n"), 3: []byte("note-3\n")}} {
		srv := httptest.NewServer(withCheckpoints(cps, next))
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/checkpoints", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /checkpoints with %d notes: %d", len(cps), resp.StatusCode)
		}
		openapitest.Check(t, req, resp, body)
	}
}
