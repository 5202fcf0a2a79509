package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/httpauth"
)

func riskyConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(p, []byte("actions:\n  payments.refund:\n    connector: http\n    url: http://127.0.0.1:1/r\n  noop.ping:\n    connector: noop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigValidateWarns(t *testing.T) {
	code, out, _ := runCLI("config", "validate", riskyConfig(t))
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"valid, 2 actions", "warning: action payments.refund: no confirm_url", "warning: action payments.refund: the name suggests money (refund)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "noop.ping") {
		t.Errorf("noop.ping warned: %q", out)
	}
}

func TestActionsCmd(t *testing.T) {
	p := riskyConfig(t)
	code, out, stderr := runCLI("actions", "--config", p)
	if code != exitOK || !strings.Contains(out, "payments.refund (http)") || !strings.Contains(out, "noop.ping (noop)") || !strings.Contains(out, "WARNING") {
		t.Errorf("table: exit %d %q %q", code, out, stderr)
	}
	code, out, _ = runCLI("actions", "payments.refund", "--config", p, "-o", "json")
	var doc struct {
		Actions []struct {
			Name    string
			Answers []struct{ Answer, Step string }
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); code != exitOK || err != nil || len(doc.Actions) != 1 || doc.Actions[0].Answers[0].Step != "unresolved" {
		t.Errorf("json: exit %d %v %q", code, err, out)
	}
	if code, _, _ := runCLI("actions", "nope", "--config", p); code != exitError {
		t.Errorf("unknown action: exit %d", code)
	}
}

func TestIngressRefusesOpenAddress(t *testing.T) {
	cfg, err := config.Load(riskyConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = startIngress(ingressOptions{addr: "0.0.0.0:0"}, nil, cfg, 1024, nil,
		func(*httpauth.Authenticator) http.Handler { return http.NotFoundHandler() }, slog.Default())
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--ingress-token-file") {
		t.Errorf("non-loopback without token: %v", err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "localhost:80": true, ":80": false, "10.0.0.1:80": false} {
		if loopback(addr) != want {
			t.Errorf("loopback(%q) = %v", addr, !want)
		}
	}
}

// TestServeIngress runs serve with --ingress and a token on kfake: a POST
// with the token executes and answers the outcome, one without is refused,
// the ingress listener also serves GET /v1/actions, and explain tells the
// key's story.
func TestServeIngress(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("ingress-t0ken-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ing := freeAddr(t)
	serveSecured(t, addr, "actions:\n  noop.ping:\n    connector: noop\n", []string{"--ingress", ing, "--ingress-token-file", tokenFile})

	do := func(method, path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+ing+path, strings.NewReader(`{"n":1}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "ing-1")
		req.Header.Set("Prefer", "wait=30")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do(http.MethodPost, "/v1/commands/noop.ping?entity=dev-1", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %s", code, body)
	}
	if code, body := do(http.MethodPost, "/v1/commands/noop.ping?entity=dev-1", "ingress-t0ken-0123456789"); code != http.StatusOK || !strings.Contains(body, `"status":"succeeded"`) {
		t.Fatalf("with token: %d %s", code, body)
	}
	// The record endpoints beside the ingress are not open to whoever
	// reaches it: the ingress token reads them (its Locations), nothing
	// less does.
	if code, body := do(http.MethodGet, "/v1/actions/noop.ping", "ingress-t0ken-0123456789"); code != http.StatusOK || !strings.Contains(body, `"connector":"noop"`) {
		t.Errorf("GET /v1/actions/noop.ping on the ingress listener: %d %s", code, body)
	}
	for _, path := range []string{"/v1/actions/noop.ping", "/v1/executions/ing-1?entity=dev-1"} {
		if code, body := do(http.MethodGet, path, ""); code != http.StatusUnauthorized || strings.Contains(body, `"n":1`) {
			t.Errorf("GET %s on the ingress listener without the token: %d %s", path, code, body)
		}
	}
	// The outcome the POST waited for is read from the outcome topic; the
	// record endpoint reads this instance's index, which waits for the
	// transaction to land (docs/http.md): no retry is needed.
	if code, body := do(http.MethodGet, "/v1/executions/ing-1?entity=dev-1", "ingress-t0ken-0123456789"); code != http.StatusOK || !strings.Contains(body, `"n":1`) {
		t.Fatalf("GET the ingress's Location with its token right after the answer: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, out, errOut := execCLI(ctx, "explain", "ing-1", "--brokers", addr)
	if code != exitOK || !strings.Contains(out, "key ing-1, entity dev-1") || !strings.Contains(out, "outcome succeeded published") {
		t.Errorf("explain: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ := execCLI(ctx, "explain", "nope", "--brokers", addr); code != exitError {
		t.Errorf("explain of an unknown key: exit %d", code)
	}
}
