package cli

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// TestConsoleRefusesOpenAddress: the console, on its own or inside serve,
// stops at start with exit 2 when it would show the records to the network
// without authentication, and on malformed access flags.
func TestConsoleRefusesOpenAddress(t *testing.T) {
	cfg := writeConfig(t)
	badKeys := filepath.Join(t.TempDir(), "trusted-keys")
	if err := os.WriteFile(badKeys, []byte("executor-a+1234+notakey\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"console on every interface", []string{"console", "--http", "0.0.0.0:0"}, []string{"--http 0.0.0.0:0 is not a loopback address", "the console would show", "--http-token-file FILE"}},
		{"console, empty host", []string{"console", "--http", ":0"}, []string{"--http :0 is not a loopback address"}},
		{"console, header without proxies", []string{"console", "--http-trusted-proxy-header", "X-Forwarded-User"}, []string{"go together"}},
		{"console, bad proxy role", []string{"console", "--http-trusted-proxy-header", "X-Forwarded-User", "--http-trusted-proxies", "127.0.0.1", "--http-trusted-proxy-role", "admin"},
			[]string{"--http-trusted-proxy-role", `unknown role "admin"`}},
		{"console, every peer a trusted proxy", []string{"console", "--http", "0.0.0.0:0", "--http-trusted-proxy-header", "X-Forwarded-User", "--http-trusted-proxies", "::/0", "--http-trusted-proxy-role", "operator"},
			[]string{"--http-trusted-proxies", `"::/0" is every address`}},
		{"console, no data allowed", []string{"console", "--max-data-bytes", "-1"}, []string{"--max-data-bytes must be at least 1, got -1"}},
		{"console, audits too often", []string{"console", "--audit-every", "10s"}, []string{"--audit-every must be 0 (off) or at least 1m"}},
		{"console, bad trusted keys", []string{"console", "--trusted-keys", badKeys}, []string{"--trusted-keys", badKeys, "line 1"}},
		{"console, missing trusted keys", []string{"console", "--trusted-keys", badKeys + ".missing"}, []string{"--trusted-keys", badKeys + ".missing"}},
		{"serve --console on every interface", []string{"serve", "--console", "0.0.0.0:0"}, []string{"--console 0.0.0.0:0 is not a loopback address", "the console would show"}},
	}
	for _, c := range cases {
		args := append(append([]string{}, c.args...), "--config", cfg, "--data-dir", t.TempDir(), "--brokers", deadAddr(t))
		code, _, stderr := runCLI(args...)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d (usage)\n%s", c.name, code, exitUsage, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.name, w, stderr)
			}
		}
	}
}

// TestServeConsoleChecksSeals: `serve --console` believes the journal
// records serve's own --trusted-keys would: a record appended without an
// executor key shows UNSIGNED, not as an execution.
func TestServeConsoleChecksSeals(t *testing.T) {
	dir := t.TempDir()
	key, tkf := filepath.Join(dir, "executor.key"), filepath.Join(dir, "trusted-keys")
	if code, out, errOut := runCLI("keygen", "--kind", "executor", "--id", "executor-a", "--out", key, "--trusted-keys", tkf); code != exitOK {
		t.Fatalf("keygen: exit %d\n%s%s", code, out, errOut)
	}
	httpAddr, consoleAddr := freeAddr(t), freeAddr(t)
	brokers, _ := serveForAccess(t, "http://"+httpAddr+"/readyz", "--http", httpAddr, "--console", consoleAddr,
		"--checkpoint-key-file", key, "--trusted-keys", tkf)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code, out, errOut := execCLI(ctx, "submit", "--brokers", brokers, "--action", "payments.refund", "--entity", "order-1",
		"--key", "refund-1", "--data", `{"amount":1}`, "--wait"); code != exitOK || !strings.Contains(out, "succeeded") {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}
	v, err := wire.SealRecord(&schemas.Record{IdempotencyKey: "forged", Entity: "order-1", Action: "payments.refund", Status: schemas.StatusUnresolved})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: schemas.DefaultTopics().Journal, Partition: 0, Key: []byte("forged"), Value: v,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	page := "http://" + consoleAddr + "/x/order-1/forged"
	var body string
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(body, "UNSIGNED journal records"); {
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed the record as UNSIGNED:\n%s", page, body)
		}
		time.Sleep(100 * time.Millisecond)
		_, _, body = request(t, http.DefaultClient, http.MethodGet, page, "", "Accept", "text/html")
	}
	if !strings.Contains(body, "No trusted record") {
		t.Fatalf("the forged key shows a state:\n%s", body)
	}
	_, _, body = request(t, http.DefaultClient, http.MethodGet, "http://"+consoleAddr+"/x/order-1/refund-1", "", "Accept", "text/html")
	if !strings.Contains(body, `<span id="exec-status" hidden>succeeded</span>`) || strings.Contains(body, "seals-unchecked") {
		t.Fatalf("the signed record should show as succeeded, with seals checked:\n%s", body)
	}
}
