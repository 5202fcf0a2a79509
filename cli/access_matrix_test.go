package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli/internal/openapitest"
)

// Credentials of TestEveryRecordEndpointOnEveryListener.
const (
	matrixReader   = "reader-0123456789abcdef01"
	matrixOperator = "operator-0123456789abcdef"
	matrixIngress  = "ingress-0123456789abcdef0"
	matrixCustomer = "Jane Roe"
)

// v1Endpoints lists every method and path under /v1/ that the OpenAPI
// document describes, so an endpoint added there is covered by the
// access test without anyone remembering to add it.
func v1Endpoints(t *testing.T) [][2]string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapitest.Spec(t), &doc); err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for p, ops := range doc.Paths {
		if !strings.HasPrefix(p, "/v1/") {
			continue
		}
		for m := range ops {
			switch m {
			case "get", "post", "put", "patch", "delete":
				out = append(out, [2]string{strings.ToUpper(m), p})
			}
		}
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	if len(out) < 6 {
		t.Fatalf("the OpenAPI document lists only %d /v1/ operations: %v", len(out), out)
	}
	return out
}

// TestEveryRecordEndpointOnEveryListener runs serve on kfake with every
// listener that can reach a record on every interface — --http,
// --ingress and --console — with a token file (a reader and an
// operator), an ingress token, and a trusted proxy at 127.0.0.2. It then
// asks every /v1/ operation of the OpenAPI document, on every listener,
// with every kind of caller: none, a wrong token, the ingress token, a
// reader, an operator, a proxy header from an untrusted peer (127.0.0.1)
// and from the trusted one (127.0.0.2). Each gets exactly what
// docs/http.md#who-may-read-the-records says, a refusal never carries the
// record, an answer carries it redacted, refused commands publish
// nothing, and the log names who read what without data or tokens.
func TestEveryRecordEndpointOnEveryListener(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "control.json")
	if code, _, errOut := runCLI("keygen", "--out", keyFile); code != exitOK {
		t.Fatalf("keygen: %s", errOut)
	}
	tokens := writeSecret(t, "ops:"+matrixReader+"\nalice:"+matrixOperator+":operator\n", 0o600)
	ingToken := writeSecret(t, matrixIngress+"\n", 0o600)
	ports := map[string]string{}
	for _, l := range []string{"http", "ingress", "console"} {
		_, ports[l], _ = net.SplitHostPort(freeAddr(t))
	}
	base := func(l string) string { return "http://127.0.0.1:" + ports[l] }
	_, stop := serveForAccess(t, base("http")+"/readyz",
		"--http", "0.0.0.0:"+ports["http"], "--ingress", "0.0.0.0:"+ports["ingress"], "--console", "0.0.0.0:"+ports["console"],
		"--http-token-file", tokens, "--ingress-token-file", ingToken, "--control-key-file", keyFile,
		"--http-trusted-proxy-header", "X-Forwarded-User", "--http-trusted-proxies", "127.0.0.2", "--console-secure-cookies")

	// From 127.0.0.1 (not a trusted proxy) and from 127.0.0.2 (the
	// trusted proxy), both to the listeners on 127.0.0.1.
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, CheckRedirect: noRedirect}
	proxy := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}, CheckRedirect: noRedirect}
	type caller struct {
		name   string
		client *http.Client
		header [2]string
	}
	callers := []caller{
		{"nobody", direct, [2]string{}},
		{"wrong token", direct, [2]string{"Authorization", "Bearer " + matrixReader + "x"}},
		{"a token's name", direct, [2]string{"Authorization", "Bearer ops"}},
		{"ingress token", direct, [2]string{"Authorization", "Bearer " + matrixIngress}},
		{"reader", direct, [2]string{"Authorization", "Bearer " + matrixReader}},
		{"operator", direct, [2]string{"Authorization", "Bearer " + matrixOperator}},
		{"proxy header from an untrusted peer", direct, [2]string{"X-Forwarded-User", "mallory@example.com"}},
		{"trusted proxy", proxy, [2]string{"X-Forwarded-User", "pat@example.com"}},
	}
	send := func(cl caller, method, url, body string, extra ...string) (int, http.Header, string) {
		t.Helper()
		if cl.header[0] != "" {
			extra = append(extra, cl.header[0], cl.header[1])
		}
		return request(t, cl.client, method, url, body, extra...)
	}

	data := `{"amount":25,"customer":{"name":"` + matrixCustomer + `"},"iban":"` + accessIBAN + `"}`
	ingress := caller{"ingress token", direct, [2]string{"Authorization", "Bearer " + matrixIngress}}
	code, _, body := send(ingress, http.MethodPost, base("ingress")+"/v1/commands/payments.refund?entity=order-1&wait=30s", data, "Idempotency-Key", "refund-1")
	if code != http.StatusOK {
		t.Fatalf("ingress POST with the ingress token: %d %s", code, body)
	}
	// The console indexes it from the journal.
	reader := callers[4]
	for deadline := time.Now().Add(30 * time.Second); ; {
		if code, _, _ := send(reader, http.MethodGet, base("console")+"/x/order-1/refund-1", ""); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the console did not show refund-1 within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	leaks := func(body string) bool {
		return strings.Contains(body, accessIBAN) || strings.Contains(body, matrixCustomer) || strings.Contains(body, `"amount"`)
	}
	pathOf := func(p string) string {
		p = strings.NewReplacer("{key}", "refund-1", "{entity}", "order-1", "{action}", "payments.refund").Replace(p)
		switch p {
		case "/v1/executions":
			p += "?status=succeeded"
		case "/v1/executions/refund-1":
			p += "?entity=order-1"
		case "/v1/commands/payments.refund":
			p += "?entity=order-1"
		}
		return p
	}
	// want gives the status a caller gets for an operation on a listener.
	want := func(listener, method, path string, cl caller) int {
		ident := map[string]bool{"reader": true, "operator": true, "trusted proxy": true}[cl.name]
		switch {
		case listener == "console":
			// The console has no /v1/ route: a person gets "no such
			// page", anybody else the login.
			if ident {
				return http.StatusNotFound
			}
			return http.StatusUnauthorized
		case method == http.MethodPost && listener == "ingress":
			if cl.name == "ingress token" {
				return http.StatusAccepted // a repeat, not waited for
			}
			return http.StatusUnauthorized
		case method == http.MethodPost:
			if ident {
				return http.StatusNotFound // --http takes no commands
			}
			return http.StatusUnauthorized
		case ident || (listener == "ingress" && cl.name == "ingress token"):
			return http.StatusOK
		}
		return http.StatusUnauthorized
	}
	n := 0
	for _, ep := range v1Endpoints(t) {
		method, path := ep[0], ep[1]
		for _, listener := range []string{"http", "ingress", "console"} {
			for _, cl := range callers {
				n++
				var extra []string
				body := ""
				if method == http.MethodPost {
					body = data
					// Each refused POST carries its own key, looked up below:
					// none may have been published.
					extra = []string{"Idempotency-Key", fmt.Sprintf("forged-%d", n), "Content-Type", "application/json"}
					if cl.name == "ingress token" && listener == "ingress" {
						extra[1] = "refund-1" // a repeat: answered from the record, nothing new
					}
				}
				got, h, answer := send(cl, method, base(listener)+pathOf(path), body, extra...)
				w := want(listener, method, path, cl)
				what := fmt.Sprintf("%s %s on --%s by %s", method, pathOf(path), listener, cl.name)
				if got != w {
					t.Errorf("%s: %d, want %d\n%s", what, got, w, answer)
				}
				if got == http.StatusUnauthorized && listener != "console" && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: 401 without WWW-Authenticate: Bearer", what)
				}
				if got != http.StatusOK && leaks(answer) {
					t.Errorf("%s: the refusal (%d) carries the record: %s", what, got, answer)
				}
				if got == http.StatusOK && (strings.Contains(answer, accessIBAN) || strings.Contains(answer, matrixCustomer)) {
					t.Errorf("%s: the answer shows a redacted field: %s", what, answer)
				}
			}
		}
	}
	for i := 1; i <= n; i++ {
		if code, _, body := send(reader, http.MethodGet, base("http")+fmt.Sprintf("/v1/executions/forged-%d", i), ""); code != http.StatusNotFound {
			t.Fatalf("a refused command was published: forged-%d is %d %s", i, code, body)
		}
	}

	// The console's pages: the record to people who may read it; its
	// decisions to operators only (the trusted proxy's users are readers
	// inside serve).
	for _, cl := range callers {
		ident := map[string]bool{"reader": true, "operator": true, "trusted proxy": true}[cl.name]
		code, _, body := send(cl, http.MethodGet, base("console")+"/x/order-1/refund-1", "", "Accept", "text/html")
		switch {
		case ident && (code != http.StatusOK || !strings.Contains(body, "[redacted]") || strings.Contains(body, accessIBAN) || strings.Contains(body, matrixCustomer)):
			t.Errorf("console execution page for %s: %d, want 200 with the data redacted\n%s", cl.name, code, body)
		case !ident && (code != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) || leaks(body) || strings.Contains(body, "payments.refund")):
			t.Errorf("console execution page for %s: %d, want 401 with the login form and nothing of the record\n%s", cl.name, code, body)
		}
		code, _, body = send(cl, http.MethodGet, base("console")+"/x/order-1/refund-1/decide/release", "", "Accept", "text/html")
		wantCode := map[string]int{"operator": http.StatusOK, "reader": http.StatusForbidden, "trusted proxy": http.StatusForbidden}[cl.name]
		if wantCode == 0 {
			wantCode = http.StatusUnauthorized
		}
		if code != wantCode {
			t.Errorf("console decision form for %s: %d, want %d\n%s", cl.name, code, wantCode, body)
		}
	}
	// A browser logs in to the console with a token of the token file;
	// its session cookie is HttpOnly, SameSite=Strict and, with
	// --console-secure-cookies, Secure.
	_, _, page := send(callers[0], http.MethodGet, base("console")+"/login", "", "Accept", "text/html")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the console's login page has no CSRF token:\n%s", page)
	}
	form := url.Values{"csrf": {m[1]}, "token": {matrixReader}, "next": {"/"}}.Encode()
	code, h, body := send(callers[0], http.MethodPost, base("console")+"/login", form, "Content-Type", "application/x-www-form-urlencoded")
	if c := h.Get("Set-Cookie"); code != http.StatusSeeOther || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "Secure") || !strings.Contains(c, "SameSite=Strict") {
		t.Errorf("console login: %d, cookie %q\n%s", code, c, body)
	}
	// Health, readiness and metrics stay open on --http.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, body := send(callers[0], http.MethodGet, base("http")+p, ""); code != http.StatusOK {
			t.Errorf("GET %s without credentials: %d %s", p, code, body)
		}
	}

	serveLog := stop()
	for _, secret := range []string{accessIBAN, matrixCustomer, matrixReader, matrixOperator, matrixIngress} {
		if strings.Contains(serveLog, secret) {
			t.Errorf("the log shows %q", secret)
		}
	}
	for _, w := range []string{
		`msg="http: record access" identity=ops by=token method=GET path=/v1/executions/refund-1`,
		`msg="http: record access" identity=ingress by=token`,
		`msg="http: record access" identity=pat@example.com by=proxy`,
		`msg="http: request refused: not authenticated" reason="unknown bearer token"`,
		`msg="console: request refused: not authenticated"`,
		`msg="console: record access" identity=alice by=token entity=order-1 key=refund-1`,
		`msg="ingress: command refused: not authenticated" action=payments.refund entity=order-1 key=forged-`,
	} {
		if !strings.Contains(serveLog, w) {
			t.Errorf("the log lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("serve's log:\n%s", serveLog)
	}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
