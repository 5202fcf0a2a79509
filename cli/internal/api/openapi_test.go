package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli/internal/api"
	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/cli/internal/openapitest"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestOpenAPIDescribesAnswers runs a real executor on kfake, gives it
// records in several states, and checks every answer of every endpoint —
// found, not found, bad input — against openapi.json. A handler whose
// answer changes shape (a field renamed, added or retyped, a status code
// added) without the document fails here.
func TestOpenAPIDescribesAnswers(t *testing.T) {
	openapitest.Document(t)
	h := onceflighttest.New(t)
	h.UseConfig(`actions:
  noop.ping:
    connector: noop
  noop.unique:
    connector: noop
    unique_by: [order]
    on_duplicate: hold
`)
	n := h.StartNode("api", t.TempDir(), onceflighttest.NodeOptions{})
	onceflighttest.WaitFor(t, 60*time.Second, "the executor ready", n.Ex.Ready)
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
	srv := httptest.NewServer(api.Handler(n.Ex, storeof.Executor(n.Ex), n.Reg, api.WithActions(acts)))
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
	// A record says how its status was established, with its evidence
	// (docs/events.md#evidence): k1 by the connector's answer to attempt
	// 1, u2 held by the executor's rules.
	for path, want := range map[string][]string{
		"/v1/executions/k1": {`"established_by":"answer"`, `"evidence":[{"kind":"attempt","attempt":1,`, `"answer":"succeeded"`},
		"/v1/executions/u2": {`"status":"held"`, `"established_by":"rule"`},
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				t.Errorf("GET %s lacks %s: %s", path, w, body)
			}
		}
	}

	// With authentication on: the refusals are documented too.
	auth, err := httpauth.New(httpauth.WithTokens(httpauth.Token{Name: "ops", Role: httpauth.RoleReader, Value: "reader-0123456789abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	asrv := httptest.NewServer(api.Handler(n.Ex, storeof.Executor(n.Ex), n.Reg, api.WithActions(acts), api.WithAuth(auth)))
	defer asrv.Close()
	for _, bearer := range []string{"", "wrong-0123456789abcdef"} {
		req, _ := http.NewRequest(http.MethodGet, asrv.URL+"/v1/executions/k1", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /v1/executions/k1 with %q = %d, want 401", bearer, resp.StatusCode)
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

// TestOpenAPIRecordIsTheOutcomeSchema: the record in openapi.json is the
// record of schemas/outcome.schema.json (what producers and consumers
// validate outcome events with), plus unevaluatedProperties: false — one
// record shape, written twice only because each document must stand alone.
func TestOpenAPIRecordIsTheOutcomeSchema(t *testing.T) {
	var oa struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapitest.Spec(t), &oa); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../../schemas/outcome.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	raw = bytes.ReplaceAll(raw, []byte("#/$defs/time"), []byte("#/components/schemas/Time"))
	var out struct {
		Defs map[string]map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	rec := oa.Components.Schemas["Record"]
	if rec["unevaluatedProperties"] != false {
		t.Errorf("openapi.json's Record allows properties it does not name")
	}
	delete(rec, "unevaluatedProperties")
	if !reflect.DeepEqual(rec, out.Defs["record"]) {
		a, _ := json.MarshalIndent(rec, "", " ")
		b, _ := json.MarshalIndent(out.Defs["record"], "", " ")
		t.Errorf("openapi.json's Record differs from outcome.schema.json's record:\n%s\nvs\n%s", a, b)
	}
}
