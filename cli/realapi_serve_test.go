package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/testlog"
)

// TestServeRealAPISecretsNowhere runs serve — with the record API, the
// console and the ingress, logging at debug — on the three shipped profiles
// against fakes of their APIs, plus an OAuth2 action, with a known value for
// every kind of secret: a bearer key in a header, a basic auth account and
// password, a Standard Webhooks secret, an OAuth2 client secret and the
// access token it is exchanged for, and a wrong key the payments API quotes
// back in its 401. It submits one command to each action, then reads every
// output the product has — serve's log, submit's and explain's answers, the
// outcomes, the audit, config validate, actions (text and JSON), the record
// API (actions, executions), /metrics, the ingress's answer, the console's
// pages, the spans sent to an OTLP collector — and looks for every secret
// in all of it.
func TestServeRealAPISecretsNowhere(t *testing.T) {
	secrets := map[string]string{
		"PAYMENTS_API_KEY":   "sk_test_serveGoodKey0123456789",
		"WRONG_PAYMENTS_KEY": "sk_test_serveWrongKey987654321",
		"MESSAGING_ACCOUNT":  "AC_serveAccount4242",
		"MESSAGING_TOKEN":    "serveMsgToken-f00dfeed",
		"WEBHOOK_SECRET":     "whsec_c2VydmUtd2ViaG9vay1zZWNyZXQta2V5",
		"OAUTH_SECRET":       "serveOAuthClientSecret-77",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	// The access token is a secret too: the token endpoint hands out the
	// payments key itself, so the OAuth2 action's refunds are accepted.
	values := map[string]string{"the basic auth value": base64.StdEncoding.EncodeToString([]byte(secrets["MESSAGING_ACCOUNT"] + ":" + secrets["MESSAGING_TOKEN"]))}
	for k, v := range secrets {
		values[k] = v
	}
	pay := apifake.NewPayments(t, secrets["PAYMENTS_API_KEY"])
	msg := apifake.NewMessaging(t, secrets["MESSAGING_ACCOUNT"], secrets["MESSAGING_TOKEN"])
	hooks := apifake.NewWebhooks(t, secrets["WEBHOOK_SECRET"])
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		id, sec, ok := r.BasicAuth()
		if !ok {
			id, sec = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		w.Header().Set("Content-Type", "application/json")
		if id != "onceflight" || sec != secrets["OAUTH_SECRET"] {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, secrets["PAYMENTS_API_KEY"])
	}))
	defer tokens.Close()
	// A trace collector: spans are an output too.
	var spans testlog.Buffer
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = spans.Write(b)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "none")

	// One actions file with the three profiles as shipped (hosts pointed
	// at the fakes) and two more actions: the payments profile with the
	// wrong key, and with an OAuth2 token instead of the key.
	dir := t.TempDir()
	block := func(name string) string {
		raw, err := os.ReadFile(filepath.Join("..", "examples", "apis", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		_, b, ok := strings.Cut(string(raw), "actions:\n")
		if !ok {
			t.Fatalf("%s.yaml has no actions", name)
		}
		return strings.NewReplacer("https://api.payments.example", pay.URL(), "https://api.messaging.example", msg.URL(),
			"https://hooks.partner.example/onceflight", hooks.URL()+"/hooks", "timeout: 10s", "timeout: 2s").Replace(b)
	}
	for _, f := range []string{"refund.schema.json", "sms.schema.json"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", "apis", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	payments := block("payments")
	wrong := strings.NewReplacer("payments.refund:", "payments.refund.wrongkey:", "PAYMENTS_API_KEY", "WRONG_PAYMENTS_KEY").Replace(payments)
	oauth := strings.NewReplacer("payments.refund:", "payments.refund.oauth:",
		`    headers:
      Authorization: "Bearer ${env:PAYMENTS_API_KEY}"
`, `    oauth2:
      token_url: `+tokens.URL+`/token
      client_id: onceflight
      client_secret: "${env:OAUTH_SECRET}"
`).Replace(payments)
	if !strings.Contains(oauth, "oauth2:") {
		t.Fatal("the payments profile's headers block moved: the OAuth2 variant was not made")
	}
	cfg := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(cfg, []byte("actions:\n"+payments+wrong+oauth+block("messaging")+block("webhooks")), 0o600); err != nil {
		t.Fatal(err)
	}

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()[0]
	httpAddr, console, ing := freeAddr(t), freeAddr(t), freeAddr(t)
	ingToken := writeSecret(t, "ingress-t0ken-realapi\n", 0o600)
	values["the ingress token"] = "ingress-t0ken-realapi"

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		code, out, errOut := execCLI(ctx, "serve", "--brokers", brokers, "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
			"--http", httpAddr, "--console", console, "--ingress", ing, "--ingress-token-file", ingToken, "--log-level", "debug",
			"--group", "realapi", "--partitions", "1", "--session-timeout", "6s", "--executor-id", "realapi")
		done <- fmt.Sprintf("exit %d\n%s%s", code, out, errOut)
	}()
	var serveLog string
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			serveLog = <-done
		}
	}
	defer stop()

	get := func(url string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := get("http://" + httpAddr + "/readyz"); code == http.StatusOK {
			break
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

	var all strings.Builder
	collect := func(where, text string) {
		fmt.Fprintf(&all, "\n--- %s\n%s", where, text)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer scancel()
	refund := `{"charge":"ch_%d","amount":700,"metadata":{"order_id":"A-%d"}}`
	commands := []struct{ action, entity, key, data, want string }{
		{"payments.refund", "order-1", "refund-1", fmt.Sprintf(refund, 1, 1), `"succeeded"`},
		{"payments.refund.wrongkey", "order-2", "refund-2", fmt.Sprintf(refund, 2, 2), `"failed"`},
		{"payments.refund.oauth", "order-3", "refund-3", fmt.Sprintf(refund, 3, 3), `"succeeded"`},
		{"customers.sms", "customer-4", "sms-4", `{"to":"+15551234567","text":"Your order shipped"}`, `"succeeded"`},
		{"orders.shipped.notify", "order-5", "hook-5", `{"order":"A-5"}`, `"succeeded"`},
	}
	// The first refund times out after the API made it: the lookup by
	// listing, with the key, confirms it.
	pay.Inject(apifake.HangAfterEffect)
	for _, cmd := range commands {
		_, out, errOut := execCLI(sctx, "submit", "--brokers", brokers, "--action", cmd.action, "--entity", cmd.entity,
			"--key", cmd.key, "--data", cmd.data, "--wait")
		collect("submit "+cmd.action, out+errOut)
		if !strings.Contains(out, cmd.want) {
			t.Errorf("submit %s: want %s in\n%s%s", cmd.action, cmd.want, out, errOut)
		}
	}
	if pay.Effects("refund-1") != 1 || pay.Lookups() == 0 || pay.Effects("refund-2") != 0 || pay.Effects("refund-3") != 1 ||
		msg.Effects("sms-4") != 1 || hooks.Effects("hook-5") != 1 {
		t.Errorf("effects: refunds %d %d %d (lookups %d), sms %d, webhook %d; want 1 0 1 (some), 1, 1",
			pay.Effects("refund-1"), pay.Effects("refund-2"), pay.Effects("refund-3"), pay.Lookups(), msg.Effects("sms-4"), hooks.Effects("hook-5"))
	}

	// The ingress answers with the record.
	req, err := http.NewRequest(http.MethodPost, "http://"+ing+"/v1/commands/payments.refund.wrongkey?entity=order-6&wait=30s",
		strings.NewReader(fmt.Sprintf(refund, 6, 6)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "refund-6")
	req.Header.Set("Authorization", "Bearer ingress-t0ken-realapi")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Errorf("ingress: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		collect("ingress answer", string(b))
	}

	// The record API and metrics.
	api := "http://" + httpAddr
	paths := []string{"/v1/actions", "/metrics"}
	for _, cmd := range commands {
		paths = append(paths, "/v1/actions/"+cmd.action, "/v1/executions/"+cmd.key+"?entity="+cmd.entity)
	}
	for _, p := range paths {
		code, body := get(api + p)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
		collect("GET "+p, body)
	}
	if _, body := get(api + "/v1/executions/refund-2?entity=order-2"); !strings.Contains(body, "HTTP 401") || !strings.Contains(body, "Invalid API Key provided: [redacted]") {
		t.Errorf("the wrong key's record: want the API's 401 with the key redacted: %s", body)
	}

	// The console: its pages once its projection has caught up.
	con := "http://" + console
	deadline = time.Now().Add(60 * time.Second)
	for {
		code, body := get(con + "/x/order-2/refund-2")
		if code == http.StatusOK && strings.Contains(body, "HTTP 401") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console does not show refund-2 within 60s: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	conPaths := []string{"/", "/actions", "/search?q=refund", "/decide"}
	for _, cmd := range commands {
		conPaths = append(conPaths, "/x/"+cmd.entity+"/"+cmd.key)
	}
	for _, p := range conPaths {
		code, body := get(con + p)
		if code != http.StatusOK {
			t.Errorf("console GET %s: %d", p, code)
		}
		collect("console "+p, body)
	}

	// The commands that read the topics and the file.
	for _, args := range [][]string{
		{"explain", "refund-2", "--brokers", brokers},
		{"explain", "refund-3", "--brokers", brokers},
		{"outcomes", "--brokers", brokers, "--offset", "beginning", "--until", "now"},
		{"audit", "--brokers", brokers, "--group", "realapi"},
		{"config", "validate", cfg},
		{"actions", "--config", cfg},
		{"actions", "--config", cfg, "-o", "json"},
	} {
		_, out, errOut := execCLI(sctx, args...)
		collect(strings.Join(args[:2], " "), out+errOut)
	}
	stop()
	collect("serve's log", serveLog)
	collect("the spans sent to the collector", spans.String())
	if !strings.Contains(spans.String(), "onceflight.confirm") {
		t.Errorf("the collector got no confirmation span (%d bytes)", len(spans.String()))
	}

	text := all.String()
	for _, want := range []string{"refund-2", "Invalid API Key provided: [redacted]", "from ${env:PAYMENTS_API_KEY}",
		"secret from ${env:OAUTH_SECRET}", "password from ${env:MESSAGING_TOKEN}", "onceflight_", "level=DEBUG"} {
		if !strings.Contains(text, want) {
			t.Errorf("the outputs lack %q: the test reads less than it means to", want)
		}
	}
	for name, v := range values {
		if i := strings.Index(text, v); i >= 0 {
			where := text[strings.LastIndex(text[:i], "\n--- ")+5:]
			where = where[:strings.IndexByte(where, '\n')]
			t.Errorf("%s appears in the output of %s: …%s…", name, where, text[max(0, i-200):i+len(v)])
		}
	}
}
