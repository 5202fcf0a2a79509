package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli"
	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/examples/connector/ledger"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/proctest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

const ledgerYAML = `actions:
  accounts.credit:
    connector: ledger
    settings: {currency: EUR}
`

// TestSameFlagsAsOnceflight: the binary's serve is onceflight's serve, flag
// for flag (help text included), and its other subcommands are there too.
func TestSameFlagsAsOnceflight(t *testing.T) {
	for _, args := range [][]string{{"serve", "--help"}, {"--help"}} {
		var ours, theirs bytes.Buffer
		if code := cli.Main(context.Background(), args, &ours, io.Discard, options...); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		cli.Main(context.Background(), args, &theirs, io.Discard)
		if ours.String() != theirs.String() {
			t.Errorf("%v differs from onceflight's:\n%s\n---\n%s", args, ours.String(), theirs.String())
		}
	}
	var help bytes.Buffer
	cli.Main(context.Background(), []string{"serve", "--help"}, &help, io.Discard, options...)
	for _, f := range []string{"--console ", "--ingress ", "--metrics-http ", "--data-dir ", "--control-key-file "} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("serve --help lacks %s", f)
		}
	}
}

// TestServeWithLedger runs the binary's serve in-process on a real (kfake)
// broker with the ledger action, console and ingress on: /readyz and
// /metrics answer, the console serves its page, a command through the
// ingress is executed by the ledger, the data dir is locked against a
// second executor, and `actions` describes the ledger action.
func TestServeWithLedger(t *testing.T) {
	brokers := kafkatest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ledger.yaml")
	if err := os.WriteFile(cfg, []byte(ledgerYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr, consoleAddr, ingressAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	data := filepath.Join(dir, "data")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// serve's log, in a file: it is written by serve's goroutines and read
	// by the test.
	serveErr, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer serveErr.Close()
	serveLog := func() string { b, _ := os.ReadFile(serveErr.Name()); return string(b) }
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"serve", "--brokers", brokers, "--config", cfg, "--data-dir", data,
			"--http", httpAddr, "--console", consoleAddr, "--ingress", ingressAddr,
			"--group", "ledger", "--partitions", "1", "--session-timeout", "6s", "--executor-id", "ledger"},
			io.Discard, serveErr, options...)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for code, _ := get(t, "http://"+httpAddr+"/readyz"); code != http.StatusOK; code, _ = get(t, "http://"+httpAddr+"/readyz") {
		select {
		case code := <-done:
			t.Fatalf("serve stopped with %d before it was ready:\n%s", code, serveLog())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready within 60s:\n%s", serveLog())
		}
	}

	req, _ := http.NewRequest(http.MethodPost, "http://"+ingressAddr+"/v1/commands/accounts.credit?entity=acct-1", strings.NewReader(`{"amount":5}`))
	req.Header.Set("Idempotency-Key", "credit-1")
	req.Header.Set("Prefer", "wait=30")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"succeeded"`) || !strings.Contains(string(body), `"currency":"EUR"`) {
		t.Fatalf("ingress: %d %s", resp.StatusCode, body)
	}
	// The counter moves when the executor's transaction is done, which the
	// outcome the ingress waited for can precede by a moment.
	const credited = `onceflight_commands_total{action="accounts.credit",status="succeeded"} 1`
	for code, m := get(t, "http://"+httpAddr+"/metrics"); !strings.Contains(m, credited); code, m = get(t, "http://"+httpAddr+"/metrics") {
		if code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("/metrics: %d, no %s:\n%s", code, credited, grep(m, "onceflight_commands_total"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, page := get(t, "http://"+consoleAddr+"/"); code != http.StatusOK || !strings.Contains(page, "<html") {
		t.Errorf("console: %d %.300s", code, page)
	}

	var second bytes.Buffer
	if code := cli.Main(context.Background(), []string{"serve", "--brokers", brokers, "--config", cfg, "--data-dir", data, "--http", freeAddr(t)},
		io.Discard, &second, options...); code == 0 || !strings.Contains(second.String(), "--data-dir") {
		t.Errorf("second serve on the same data dir: exit %d\n%s", code, second.String())
	}
	var acts bytes.Buffer
	if code := cli.Main(context.Background(), []string{"actions", "--config", cfg}, &acts, io.Discard, options...); code != 0 ||
		!strings.Contains(acts.String(), "accounts.credit") || !strings.Contains(acts.String(), "ledger") {
		t.Errorf("actions: exit %d\n%s", code, acts.String())
	}

	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve: exit %d after its context ended:\n%s", code, serveLog())
	}
}

// grep returns the lines of s that contain w.
func grep(s, w string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, w) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// freeAddr returns a loopback address nothing listens on right now,
// outside the ports other tests' listeners on :0 are given.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestLedgerOnHarness: a connector of your own under the executor harness
// (onceflighttest): the same key twice is one credit, and the audit of the
// topics holds.
func TestLedgerOnHarness(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig(ledgerYAML, "ledger")
	l := ledger.New("EUR")
	h.Opts = append(h.Opts, consumer.WithConnector("ledger", func(*consumer.Action) (connectors.Connector, error) { return l, nil }))
	h.Start(t.TempDir())
	h.SubmitAction("c-1", "accounts.credit", "acct-1", "credit-1", `{"amount":5}`)
	h.SubmitAction("c-2", "accounts.credit", "acct-1", "credit-1", `{"amount":5}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	for _, id := range []string{"c-1", "c-2"} {
		if o := seen[id][0]; o.Record.Status != schemas.StatusSucceeded || !strings.Contains(string(o.Record.Result), `"currency":"EUR"`) {
			t.Errorf("%s: %s %s", id, o.Record.Status, o.Record.Result)
		}
	}
	if n := l.Effects("credit-1"); n != 1 {
		t.Errorf("credit-1 applied %d times, want 1", n)
	}
	h.Audit()
}
