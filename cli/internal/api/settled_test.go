package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli/internal/api"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestRecordNotOlderThanItsOutcome reads every outcome the moment the
// outcome topic has it and asks the record endpoint for its record at
// once. The transaction that made the outcome visible reaches the
// executor's index one local write later; without waiting for it
// (storeof.Settled) some of these answer 404 or a record still in progress.
func TestRecordNotOlderThanItsOutcome(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig("actions:\n  noop.ping:\n    connector: noop\n")
	n := h.StartNode("settled", t.TempDir(), onceflighttest.NodeOptions{})
	onceflighttest.WaitFor(t, 60*time.Second, "the executor ready", n.Ex.Ready)
	srv := httptest.NewServer(api.Handler(n.Ex, storeof.Executor(n.Ex), n.Reg))
	defer srv.Close()

	const total = 150
	seen := map[string][]schemas.Outcome{}
	for i := range total {
		h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("e%d", i%7), fmt.Sprintf("k%d", i), `{}`)
		// Read outcomes as they come, one by one, so each GET follows its
		// outcome as closely as a client would.
		for got := len(seen); got < i+1; got = len(seen) {
			h.Outcomes(got+1, seen, nil)
		}
		for id, os := range seen {
			if id != fmt.Sprintf("c%d", i) {
				continue
			}
			o := os[0]
			url := fmt.Sprintf("%s/v1/executions/%s?entity=%s", srv.URL, o.Record.IdempotencyKey, o.Record.Entity)
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			var body struct{ Executions []schemas.Record }
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err != nil || len(body.Executions) != 1 || body.Executions[0].Status != o.Record.Status {
				t.Fatalf("GET the record of %s right after its %s outcome: %d %+v %v", o.Record.IdempotencyKey, o.Record.Status, resp.StatusCode, body, err)
			}
		}
	}
}

// TestIntentInFlightIsListed: an execution in flight has its intent in
// the executor's overlay only (DESIGN.md, "An intent stays out of Pebble
// until its record is replaced"); the record API still answers it as
// in_progress by key, by status, and as its entity's key in flight.
func TestIntentInFlightIsListed(t *testing.T) {
	svc := apifake.NewEffects(t, apifake.WithScript(func(string, int) apifake.Fault { return apifake.HangAfterEffect }))
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  pay.call:\n    connector: http\n    url: %s\n    timeout: 30s\n", svc.URL("")))
	n := h.StartNode("intents", t.TempDir(), onceflighttest.NodeOptions{})
	onceflighttest.WaitFor(t, 60*time.Second, "the executor ready", n.Ex.Ready)
	srv := httptest.NewServer(api.Handler(n.Ex, storeof.Executor(n.Ex), n.Reg))
	defer srv.Close()
	h.SubmitAction("c1", "pay.call", "order-1", "k1", `{"amount":1}`)
	onceflighttest.WaitFor(t, 30*time.Second, "the attempt at the service", func() bool {
		posts, _, _ := svc.Counts("k1")
		return len(posts) == 1
	})
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var recs struct{ Executions []schemas.Record }
	get("/v1/executions/k1?entity=order-1", &recs)
	if len(recs.Executions) != 1 || recs.Executions[0].Status != schemas.StatusInProgress {
		t.Errorf("by key: %+v, want k1 in_progress", recs.Executions)
	}
	recs.Executions = nil
	get("/v1/executions?status=in_progress", &recs)
	if len(recs.Executions) != 1 || recs.Executions[0].IdempotencyKey != "k1" {
		t.Errorf("in_progress: %+v, want k1", recs.Executions)
	}
	var ent struct {
		State struct {
			InFlightKey string `json:"in_flight_key"`
		}
	}
	get("/v1/entities/order-1", &ent)
	if ent.State.InFlightKey != "k1" {
		t.Errorf("entity order-1: in flight %q, want k1", ent.State.InFlightKey)
	}
}
