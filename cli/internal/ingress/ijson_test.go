package ingress

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// A body that is a JSON object but not I-JSON, or names a key twice, is
// answered 400 invalid_command with its reason. The client refuses to
// publish such data (schemas.CheckIJSON), which the handler would
// otherwise have answered 503 "publish: ...", as if Kafka were down.
func TestBodyMustBeIJSON(t *testing.T) {
	for _, body := range []string{`{"n":1e400}`, `{"n":1,"n":2}`, `{"s":"\ud800"}`} {
		r := httptest.NewRequest(http.MethodPost, "/v1/commands/noop.ping?entity=e1", strings.NewReader(body))
		r.SetPathValue("action", "noop.ping")
		r.Header.Set("Idempotency-Key", "k1")
		_, p := ParseRequest(r, 1<<10, time.Minute, func(string) bool { return true })
		if p == nil || p.Status != http.StatusBadRequest || p.Code != schemas.CodeInvalidCommand || !strings.Contains(p.Detail, "I-JSON") {
			t.Errorf("%s: %+v, want 400 invalid_command naming I-JSON", body, p)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/commands/noop.ping?entity=e1", strings.NewReader(`{"n":1.5e308,"s":"\ud83d\ude00"}`))
	r.SetPathValue("action", "noop.ping")
	r.Header.Set("Idempotency-Key", "k1")
	if _, p := ParseRequest(r, 1<<10, time.Minute, func(string) bool { return true }); p != nil {
		t.Errorf("I-JSON body refused: %+v", p)
	}
}
