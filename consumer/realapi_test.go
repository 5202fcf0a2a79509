package consumer_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/testlog"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestPaymentsProfileEndToEnd runs examples/apis/payments.yaml in a real
// executor on kfake against the payments fake (docs/connectors.md#calling-a-real-api):
// a timeout after the refund was made is confirmed by listing refunds and
// recorded succeeded with one refund; a wrong key is recorded failed with
// the API's 401; a 409 for a key in flight is sent again (statuses.not_done)
// and recorded succeeded with one refund. Neither key appears in the executor's logs (at debug),
// its metrics, its outcomes or its journal.
func TestPaymentsProfileEndToEnd(t *testing.T) {
	const goodKey, wrongKey = "sk_test_e2eGoodKey0123456789", "sk_test_e2eWrongKey987654321"
	t.Setenv("PAYMENTS_API_KEY", goodKey)
	t.Setenv("WRONG_PAYMENTS_KEY", wrongKey)
	api := apifake.NewPayments(t, goodKey)
	api.Inject(apifake.HangAfterEffect)

	dir := filepath.Join("..", "examples", "apis")
	raw, err := os.ReadFile(filepath.Join(dir, "payments.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := filepath.Abs(filepath.Join(dir, "refund.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	profile := strings.NewReplacer("https://api.payments.example", api.URL(), "schema: refund.schema.json", "schema: "+schema,
		"timeout: 10s", "timeout: 500ms", "confirm_timeout: 2m", "confirm_timeout: 10s").Replace(string(raw))
	_, block, _ := strings.Cut(profile, "actions:\n")
	wrong := strings.NewReplacer("payments.refund:", "payments.refund.wrongkey:", "PAYMENTS_API_KEY", "WRONG_PAYMENTS_KEY").Replace(block)
	h := onceflighttest.New(t)
	h.UseConfig(profile + wrong)

	logs := &testlog.Buffer{}
	h.Tune = func(c *consumer.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h.Reg = prometheus.NewRegistry()
	h.Start(t.TempDir())

	data := `{"charge":"ch_9","amount":700,"metadata":{"order_id":"A-9"}}`
	// One after the other: the fake's one injected hang must meet the
	// refund with the right key, not whichever POST arrives first.
	seen := map[string][]schemas.Outcome{}
	h.SubmitAction("c-timeout", "payments.refund", "order-9", "refund-9", data)
	h.Outcomes(1, seen, nil)
	h.SubmitAction("c-wrongkey", "payments.refund.wrongkey", "order-10", "refund-10", strings.ReplaceAll(data, "ch_9", "ch_10"))
	h.Outcomes(2, seen, nil)

	// The API's 409 for a key whose first request still runs: the
	// profile's statuses.not_done sends it again, with the same key.
	api.Inject(apifake.Fault{Before: true, Status: http.StatusConflict,
		Body: `{"error":{"type":"idempotency_error","message":"another request with this key is in progress"}}`})
	h.SubmitAction("c-conflict", "payments.refund", "order-11", "refund-11", strings.ReplaceAll(data, "ch_9", "ch_11"))
	h.Outcomes(3, seen, nil)
	if rec := seen["c-conflict"][0].Record; rec.Status != schemas.StatusSucceeded || api.Effects("refund-11") != 1 {
		t.Errorf("a 409 for a key in flight, then the refund: %s %+v, %d effects; want succeeded, one effect", rec.Status, rec.Error, api.Effects("refund-11"))
	}

	ok := seen["c-timeout"][0].Record
	if ok.Status != schemas.StatusSucceeded || api.Effects("refund-9") != 1 || api.Lookups() == 0 || string(ok.Result) != `{"refund_id":"re_1","status":"succeeded"}` {
		t.Errorf("timeout after the effect: %s %s, %d effects, %d lookups; want succeeded by the lookup's result, one effect",
			ok.Status, ok.Result, api.Effects("refund-9"), api.Lookups())
	}
	bad := seen["c-wrongkey"][0].Record
	if bad.Status != schemas.StatusFailed || bad.Error == nil || bad.Error.Code != schemas.CodeConnectorRejected ||
		!strings.Contains(bad.Error.Message, "HTTP 401") || api.Effects("refund-10") != 0 {
		t.Errorf("wrong key: %s %+v, %d effects; want failed connector_rejected with the 401", bad.Status, bad.Error, api.Effects("refund-10"))
	}

	var outputs strings.Builder
	outputs.WriteString(logs.String())
	for _, os := range seen {
		b, _ := json.Marshal(os)
		outputs.Write(b)
	}
	for _, r := range h.JournalAll() {
		b, _ := json.Marshal(r)
		outputs.Write(b)
	}
	mfs, err := h.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		fmt.Fprintln(&outputs, mf.String())
	}
	if !strings.Contains(outputs.String(), "refund-10") || !strings.Contains(outputs.String(), "onceflight_") {
		t.Fatalf("the outputs gathered lack what they should hold (%d bytes)", outputs.Len())
	}
	for _, s := range []string{goodKey, wrongKey} {
		if i := strings.Index(outputs.String(), s); i >= 0 {
			t.Errorf("a key appears in the executor's output: …%s…", outputs.String()[max(0, i-200):i+len(s)])
		}
	}
}
