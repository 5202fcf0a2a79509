package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/internal/config"
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
	_, err = startIngress(context.Background(), ingressOptions{addr: "0.0.0.0:0"}, nil, cfg, 1024, http.NotFoundHandler(), slog.Default())
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--ingress-token-file") {
		t.Errorf("non-loopback without token: %v", err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "localhost:80": true, ":80": false, "10.0.0.1:80": false} {
		if loopback(addr) != want {
			t.Errorf("loopback(%q) = %v", addr, !want)
		}
	}
}
