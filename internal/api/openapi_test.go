package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/api"
	"github.com/onceflight/onceflight/internal/executortest"
	"github.com/onceflight/onceflight/internal/inspect"
	"github.com/onceflight/onceflight/internal/openapitest"
	"github.com/onceflight/onceflight/schemas"
)

// TestOpenAPIDescribesAnswers runs a real executor on kfake, gives it
// records in several states, and checks every answer of every endpoint —
// found, not found, bad input — against openapi.json. A handler whose
// answer changes shape (a field renamed, added or retyped, a status code
// added) without the document fails here.
func TestOpenAPIDescribesAnswers(t *testing.T) {
	openapitest.Document(t)
	h := executortest.New(t)
	h.UseConfig(`actions:
  noop.ping:
    connector: noop
  noop.unique:
    connector: noop
    unique_by: [order]
    on_duplicate: hold
`)
	n := h.StartNode("api", t.TempDir(), executortest.NodeOptions{})
	executortest.WaitFor(t, 60*time.Second, "the executor ready", n.Ex.Ready)
	h.Submit("c1", "order-1", "k1", `{"n":1}`)
	h.SubmitAction("c2", "nope.action", "order-1", "k2", `{}`)
	h.SubmitAction("c3", "noop.unique", "order-2", "u1", `{"order":"o-9"}`)
	h.SubmitAction("c4", "noop.unique", "order-2", "u2", `{"order":"o-9"}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(4, seen, nil)
	if seen["c4"][0].Record.Status != schemas.StatusHeld {
		t.Fatalf("c4: %+v, want held", seen["c4"][0].Record)
	}

	acts, err := inspect.Describe(h.Config, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(n.Ex, n.Store, n.Reg, api.WithActions(acts)))
	defer srv.Close()
	for _, c := range []struct {
		path string
		code int
	}{
		{"/healthz", 200},
		{"/readyz", 200},
		{"/metrics", 200},
		{"/openapi.json", 200},
		{"/v1/executions/k1", 200},
		{"/v1/executions/k1?entity=order-1", 200},
		{"/v1/executions/k2", 200},
		{"/v1/executions/u2", 200},
		{"/v1/executions/k1?entity=order-9", 404},
		{"/v1/executions/none", 404},
		{"/v1/executions?status=succeeded", 200},
		{"/v1/executions?status=rejected&limit=5", 200},
		{"/v1/executions?status=held", 200},
		{"/v1/executions?status=unresolved", 200},
		{"/v1/executions?status=bogus", 400},
		{"/v1/executions?status=succeeded&limit=0", 400},
		{"/v1/entities/order-1", 200},
		{"/v1/entities/order-404", 404},
		{"/v1/actions", 200},
		{"/v1/actions/noop.unique", 200},
		{"/v1/actions/nope", 404},
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != c.code {
			t.Errorf("GET %s = %d, want %d: %s", c.path, resp.StatusCode, c.code, body)
			continue
		}
		openapitest.Check(t, req, resp, body)
	}
}

// TestOpenAPICatchesDrift: the check is not vacuous — an answer with a
// field the document does not have, or without one it requires, fails.
func TestOpenAPICatchesDrift(t *testing.T) {
	for _, body := range []string{
		`{"status":"ok","extra":1}`,
		`{"state":"ok"}`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}))
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		ft := &fakeT{TB: t}
		openapitest.Check(ft, req, resp, b)
		if !ft.failed {
			t.Errorf("%s passed the check", body)
		}
	}
}

// fakeT records a failure instead of failing the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Fatalf(string, ...any) { f.failed = true }
func (f *fakeT) Helper()               {}
