package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli/internal/api"
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
