package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/internal/testlog"
)

const (
	accessIBAN  = "DE89370400440532013000"
	accessToken = "ops-0123456789abcdef0123"
)

func writeSecret(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "http-tokens")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeRefusesOpenRecords: serve stops at start, before it touches a
// broker or the data dir, when --http would publish the records to the
// network without authentication, or when the authentication flags are
// wrong; each error names the flag or file and line to fix.
func TestServeRefusesOpenRecords(t *testing.T) {
	cfg := writeConfig(t)
	good := writeSecret(t, "ops:"+accessToken+"\n", 0o600)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"every interface", []string{"--http", "0.0.0.0:0"},
			[]string{"--http 0.0.0.0:0 is not a loopback address", "--http-token-file FILE", "--http-trusted-proxy-header", "--metrics-http ADDR"}},
		{"empty host", []string{"--http", ":0"}, []string{"--http :0 is not a loopback address"}},
		{"a proxy header alone is no authentication", []string{"--http", "0.0.0.0:0", "--http-trusted-proxy-header", "X-Forwarded-User"},
			[]string{"--http-trusted-proxy-header X-Forwarded-User needs --http-trusted-proxies"}},
		{"proxies without a header", []string{"--http-trusted-proxies", "127.0.0.1"}, []string{"--http-trusted-proxies needs --http-trusted-proxy-header"}},
		{"bad proxy range", []string{"--http-trusted-proxy-header", "X-Forwarded-User", "--http-trusted-proxies", "10.0.0.0/40"},
			[]string{"--http-trusted-proxies", `"10.0.0.0/40" is neither an address nor a CIDR range`}},
		{"token file readable by all", []string{"--http", "0.0.0.0:0", "--http-token-file", writeSecret(t, "ops:"+accessToken+"\n", 0o644)},
			[]string{"--http-token-file", "has mode 0644", "chmod 600"}},
		{"malformed token line", []string{"--http-token-file", writeSecret(t, "ops:"+accessToken+"\n\nops "+accessToken+"x\n", 0o600)},
			[]string{"--http-token-file", "http-tokens line 3: want NAME:TOKEN or NAME:TOKEN:ROLE"}},
		{"missing token file", []string{"--http-token-file", good + ".missing"}, []string{"--http-token-file", "no such file"}},
		{"every peer a trusted proxy", []string{"--http", "0.0.0.0:0", "--http-trusted-proxy-header", "X-Forwarded-User", "--http-trusted-proxies", "10.0.0.0/8,0.0.0.0/0"},
			[]string{"--http-trusted-proxies", `"0.0.0.0/0" is every address`}},
	}
	for _, c := range cases {
		args := append([]string{"serve", "--config", cfg, "--data-dir", t.TempDir(), "--brokers", deadAddr(t)}, c.args...)
		code, _, stderr := runCLI(args...)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d (usage)\n%s", c.name, code, exitUsage, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.name, w, stderr)
			}
		}
		if strings.Contains(stderr, accessToken) {
			t.Errorf("%s: stderr shows the token:\n%s", c.name, stderr)
		}
	}
}

// TestServeRecordAccess runs serve on kfake with --http on every interface
// (0.0.0.0), a token file, a trusted proxy range the test is not in, and
// --metrics-http, and submits a refund whose data holds a customer's name
// and IBAN. Without a valid token the record is 401 and nowhere in the
// answer; health, readiness and metrics answer without one on both
// listeners; with the token the record comes back with the fields of the
// action's redact list hidden; the log shows neither the IBAN nor the
// token.
func TestServeRecordAccess(t *testing.T) {
	tokens := writeSecret(t, "# who may read the records\nops:"+accessToken+"\n", 0o640)
	_, port, _ := net.SplitHostPort(freeAddr(t))
	httpAddr := "0.0.0.0:" + port // every interface; the test reaches it on loopback
	local := "http://127.0.0.1:" + port
	metrics := freeAddr(t)
	ing := freeAddr(t)
	ingToken := writeSecret(t, "ingress-t0ken-0123456789\n", 0o600)
	brokers, stopServe := serveForAccess(t, local+"/readyz", "--http", httpAddr,
		"--http-token-file", tokens, "--http-trusted-proxy-header", "X-Forwarded-User", "--http-trusted-proxies", "192.0.2.0/24",
		"--metrics-http", metrics, "--ingress", ing, "--ingress-token-file", ingToken, "--log-level", "debug")
	var serveLog string
	stop := func() { serveLog = stopServe() }
	defer stop()
	get := func(url string, header ...string) (int, http.Header, string) {
		t.Helper()
		return request(t, http.DefaultClient, http.MethodGet, url, "", header...)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer scancel()
	data := `{"amount":25,"customer":{"name":"Jane Roe"},"iban":"` + accessIBAN + `"}`
	code, out, errOut := execCLI(sctx, "submit", "--brokers", brokers, "--action", "payments.refund", "--entity", "order-1",
		"--key", "refund-1", "--data", data, "--wait")
	if code != exitOK || !strings.Contains(out, "succeeded") {
		t.Fatalf("submit: exit %d\n%s%s", code, out, errOut)
	}

	record := local + "/v1/executions/refund-1?entity=order-1"
	for _, c := range []struct {
		name   string
		header []string
	}{
		{"no credentials", nil},
		{"wrong token", []string{"Authorization", "Bearer " + accessToken + "0"}},
		{"the token's name", []string{"Authorization", "Bearer ops"}},
		{"proxy header from outside the trusted range", []string{"X-Forwarded-User", "mallory"}},
	} {
		code, h, body := get(record, c.header...)
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: %d %q %s", c.name, code, h.Get("WWW-Authenticate"), body)
		}
		if strings.Contains(body, accessIBAN) || strings.Contains(body, "amount") {
			t.Errorf("%s: the refused answer holds the record: %s", c.name, body)
		}
	}
	for _, base := range []string{local, "http://" + metrics} {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			if code, _, body := get(base + path); code != http.StatusOK {
				t.Errorf("GET %s%s without credentials: %d %s", base, path, code, body)
			}
		}
	}
	if code, _, body := get("http://"+metrics+"/v1/executions/refund-1", "Authorization", "Bearer "+accessToken); code != http.StatusNotFound {
		t.Errorf("--metrics-http serves records: %d %s", code, body)
	}
	code, h, body := get(record, "Authorization", "Bearer "+accessToken)
	if code != http.StatusOK || !strings.Contains(body, `"amount":25`) || !strings.Contains(body, `"iban":"[redacted]"`) ||
		!strings.Contains(body, `"name":"[redacted]"`) || strings.Contains(body, accessIBAN) || strings.Contains(body, "Jane Roe") {
		t.Errorf("with the token: %d %s", code, body)
	}
	if h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Content-Security-Policy") == "" {
		t.Errorf("record answer headers: %v", h)
	}

	// The ingress's answer carries the record, redacted as well.
	req, err := http.NewRequest(http.MethodPost, "http://"+ing+"/v1/commands/payments.refund?entity=order-2&wait=30s", strings.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "refund-2")
	req.Header.Set("Authorization", "Bearer ingress-t0ken-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"iban":"[redacted]"`) || strings.Contains(string(b), accessIBAN) {
		t.Errorf("ingress answer: %d %s", resp.StatusCode, b)
	}

	stop()
	for _, secret := range []string{accessIBAN, "Jane Roe", accessToken} {
		if strings.Contains(serveLog, secret) || strings.Contains(errOut, secret) {
			t.Errorf("the log shows %q:\n%s", secret, serveLog)
		}
	}
	for _, want := range []string{`msg="http: record access" identity=ops by=token`, `reason="unknown bearer token"`, `http_auth="1 bearer token(s), header X-Forwarded-User`} {
		if !strings.Contains(serveLog, want) {
			t.Errorf("the log lacks %q:\n%s", want, serveLog)
		}
	}
}

// TestIngressTokenFileMode: the ingress token file follows the rules of
// every secret file and token, before anything listens: not readable by
// others, at least 16 characters, and not a token of --http-token-file
// (whose readers would then also submit commands).
func TestIngressTokenFileMode(t *testing.T) {
	f := writeSecret(t, "t0ken-0123456789abcdef\n", 0o604)
	_, _, err := startIngress(ingressOptions{addr: "127.0.0.1:0", tokenFile: f}, nil, nil, 1024, nil, nil, nil)
	if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "--ingress-token-file") || !strings.Contains(fmt.Sprint(err), f+" has mode 0604") {
		t.Errorf("world-readable ingress token file: %v", err)
	}
	f = writeSecret(t, "t0ken\n", 0o600)
	_, _, err = startIngress(ingressOptions{addr: "127.0.0.1:0", tokenFile: f}, nil, nil, 1024, nil, nil, nil)
	if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "the token is 5 characters, want at least 16") || strings.Contains(fmt.Sprint(err), "t0ken\n") {
		t.Errorf("short ingress token: %v", err)
	}
	auth, err := httpauth.New(httpauth.WithTokens(httpauth.Token{Name: "ops", Role: httpauth.RoleReader, Value: accessToken}))
	if err != nil {
		t.Fatal(err)
	}
	f = writeSecret(t, accessToken+"\n", 0o600)
	_, _, err = startIngress(ingressOptions{addr: "127.0.0.1:0", tokenFile: f}, nil, nil, 1024, auth, nil, nil)
	if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "holds the token of ops in --http-token-file") || strings.Contains(fmt.Sprint(err), accessToken) {
		t.Errorf("an --http token as the ingress token: %v", err)
	}
}

// accessActions is the actions file of the access tests: a refund whose
// customer name and IBAN are redacted.
const accessActions = "actions:\n  payments.refund:\n    connector: noop\n    redact: [customer.name, iban]\n"

// serveForAccess runs serve with accessActions and args on a kfake
// cluster of its own until the test ends or stop is called, and waits
// until readyURL answers 200. stop returns serve's exit code and log.
func serveForAccess(t *testing.T, readyURL string, args ...string) (brokers string, stop func() string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers = c.ListenAddrs()[0]
	dir := t.TempDir()
	cfg := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(cfg, []byte(accessActions), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		code, _, errOut := execCLI(ctx, append([]string{"serve", "--brokers", brokers, "--config", cfg, "--data-dir", dir,
			"--group", "access", "--partitions", "1", "--session-timeout", "6s", "--executor-id", "access"}, args...)...)
		done <- fmt.Sprintf("exit %d\n%s", code, errOut)
	}()
	var log string
	stop = func() string {
		if cancel != nil {
			cancel()
			log = <-done
			cancel = nil
		}
		return log
	}
	t.Cleanup(func() { stop() })
	for deadline := time.Now().Add(60 * time.Second); ; {
		if code, _, _ := request(t, http.DefaultClient, http.MethodGet, readyURL, ""); code == http.StatusOK {
			return brokers, stop
		}
		select {
		case out := <-done:
			done <- out // for the deferred stop, which waits for it
			t.Fatalf("serve stopped before it was ready: %s", out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("serve not ready within 60s")
		}
	}
}

// request sends method url with body and the header pairs (Host among
// them) through cl; a connection error is status 0 with the error as the
// body.
func request(t *testing.T, cl *http.Client, method, url, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestIngressWithoutTokenAnswersOnlyLoopbackNames: an ingress without a
// token (allowed on loopback only) refuses commands whose Host is not a
// loopback name, so a web page rebound to 127.0.0.1 (DNS rebinding)
// cannot trigger effects; the refusal is logged.
func TestIngressWithoutTokenAnswersOnlyLoopbackNames(t *testing.T) {
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	records := func(*httpauth.Authenticator) http.Handler { return http.NotFoundHandler() }
	srv, addr, err := startIngress(ingressOptions{addr: "127.0.0.1:0"}, nil, nil, 1024, nil, records, log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	code, _, b := request(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v1/commands/payments.refund?entity=order-1", `{"amount":1}`,
		"Host", "rebind.attacker.test:8081", "Idempotency-Key", "refund-9")
	if code != http.StatusForbidden || !strings.Contains(b, "DNS rebinding") {
		t.Errorf("a command addressed to another name: %d %s, want 403", code, b)
	}
	if want := `msg="ingress: command refused: not authenticated" action=payments.refund entity=order-1 key=refund-9 status=403`; !strings.Contains(logs.String(), want) {
		t.Errorf("the log lacks %s:\n%s", want, logs.String())
	}
}
