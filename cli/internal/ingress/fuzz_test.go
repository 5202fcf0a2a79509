package ingress

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

func outcome(st schemas.Status, code string) client.Outcome {
	return client.Outcome{Status: st, ErrorCode: code}
}

// FuzzIngressRequest: whatever the path value, headers, query and body,
// ParseRequest returns either a problem with a 4xx status and a code, or a
// command whose fields respect the limits it promises.
func FuzzIngressRequest(f *testing.F) {
	f.Add("noop.ping", "k1", "entity=e", "", "wait=5", "", "", `{"a":1}`)
	f.Add("a", `"k\"q"`, "wait=2s", "ent", "", "3", "2026-01-01T00:00:00Z", ``)
	f.Add("a", "", "", "", "respond-async, wait=x", "-1", "x", `[`)
	f.Fuzz(func(t *testing.T, action, key, query, entity, prefer, version, deadline, body string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/commands/x", bytes.NewReader([]byte(body)))
		r.URL.RawQuery = query
		r.SetPathValue("action", action)
		for k, v := range map[string]string{"Idempotency-Key": key, "Onceflight-Entity": entity, "Prefer": prefer,
			"Onceflight-Expected-Version": version, "Onceflight-Deadline": deadline} {
			if v != "" {
				r.Header[k] = []string{v}
			}
		}
		req, p := ParseRequest(r, 64, 10*time.Second, func(a string) bool { return a != "unknown" })
		if p != nil {
			if p.Status < 400 || p.Status > 499 || p.Code == "" || p.Detail == "" {
				t.Fatalf("problem %+v", p)
			}
			return
		}
		c := req.Command
		if c.Action == "" || c.Action == "unknown" || c.Key == "" || c.Entity == "" || len(c.Key) > maxKeyBytes || len(c.Entity) > maxKeyBytes {
			t.Fatalf("command %+v", c)
		}
		if c.Data != nil && (len(c.Data) > 64 || !json.Valid(c.Data) || c.Data[0] != '{') {
			t.Fatalf("data %q", c.Data)
		}
		if req.Wait < 0 || req.Wait > 10*time.Second {
			t.Fatalf("wait %s", req.Wait)
		}
	})
}
