package httpauth

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	aliceTok = "alice-0123456789abcdef"
	bobTok   = "bob-0123456789abcdef0"
)

func writeFile(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func TestLoadTokenFile(t *testing.T) {
	p := writeFile(t, "# readers and operators\n\nalice:"+aliceTok+"\n  bob:"+bobTok+":operator  \nalice:"+strings.Repeat("r", 32)+":reader\n", 0o640)
	ts, err := LoadTokenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Token{{"alice", RoleReader, aliceTok}, {"bob", RoleOperator, bobTok}, {"alice", RoleReader, strings.Repeat("r", 32)}}
	if fmt.Sprint(ts) != fmt.Sprint(want) {
		t.Errorf("tokens %v, want %v", ts, want)
	}

	for _, c := range []struct {
		name, body string
		mode       os.FileMode
		want       string
	}{
		{"world readable", "alice:" + aliceTok + "\n", 0o644, "has mode 0644: other users may read or change it; chmod 600"},
		{"group writable", "alice:" + aliceTok + "\n", 0o660, "has mode 0660"},
		{"no colon", "# c\nalice:" + aliceTok + "\n" + aliceTok + "x\n", 0o600, "line 3: want NAME:TOKEN or NAME:TOKEN:ROLE, got 1 field(s)"},
		{"four fields", "alice:" + aliceTok + ":reader:x\n", 0o600, "line 1: want NAME:TOKEN or NAME:TOKEN:ROLE, got 4"},
		{"short token", "\nalice:short\n", 0o600, "line 2: the token of alice is 5 characters, want at least 16"},
		{"bad role", "alice:" + aliceTok + ":admin\n", 0o600, `line 1: alice: unknown role "admin" (want reader or operator)`},
		{"bad name", " :" + aliceTok + "\n", 0o600, `line 1: name "" must be`},
		{"token characters", "alice:" + aliceTok + " x\n", 0o600, "line 1: the token of alice has characters other than"},
		{"duplicate token", "alice:" + aliceTok + "\nbob:" + aliceTok + "\n", 0o600, "line 2: the token of line 1 again"},
		{"empty", "# nothing\n\n", 0o600, "holds no token"},
	} {
		p := writeFile(t, c.body, c.mode)
		_, err := LoadTokenFile(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want an error naming %s with %q", c.name, err, p, c.want)
			continue
		}
		// A token in an error message ends up in logs and CI output.
		if strings.Contains(err.Error(), aliceTok) {
			t.Errorf("%s: the error shows the token: %v", c.name, err)
		}
	}
	if _, err := LoadTokenFile(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "token file") {
		t.Errorf("missing file: %v", err)
	}
	if err := CheckPrivate(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

func TestRoles(t *testing.T) {
	for _, c := range []struct {
		have, need Role
		ok         bool
	}{
		{RoleReader, RoleReader, true}, {RoleReader, RoleOperator, false},
		{RoleOperator, RoleReader, true}, {RoleOperator, RoleOperator, true},
		{"", RoleReader, false}, {"admin", RoleReader, false},
	} {
		if c.have.Allows(c.need) != c.ok {
			t.Errorf("%q allows %q: %v", c.have, c.need, !c.ok)
		}
	}
	if _, err := ParseRole("root"); err == nil {
		t.Error("ParseRole(root) accepted")
	}
}

func TestParseProxies(t *testing.T) {
	ps, err := ParseProxies([]string{"10.1.2.3/8", "127.0.0.1", " ::1 "})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ps) != "[10.0.0.0/8 127.0.0.1/32 ::1/128]" {
		t.Errorf("proxies %v", ps)
	}
	if _, err := ParseProxies([]string{"10.0.0.0/33"}); err == nil || !strings.Contains(err.Error(), `"10.0.0.0/33" is neither`) {
		t.Errorf("bad range: %v", err)
	}
	for _, all := range []string{"0.0.0.0/0", "::/0", "10.0.0.0/0"} {
		if _, err := ParseProxies([]string{"127.0.0.1", all}); err == nil || !strings.Contains(err.Error(), "is every address") {
			t.Errorf("%s accepted as a trusted proxy: %v", all, err)
		}
	}
}

func TestNewNeedsBothProxySettings(t *testing.T) {
	if _, err := New(WithTrustedProxy("X-Forwarded-User", nil, "")); err == nil {
		t.Error("a header without proxies accepted")
	}
	if _, err := New(WithTrustedProxy("", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, "")); err == nil {
		t.Error("proxies without a header accepted")
	}
	a, err := New()
	if err != nil || a.Enabled() || a.Describe() != "none" {
		t.Errorf("no method: %v %v %q", err, a.Enabled(), a.Describe())
	}
	var nilAuth *Authenticator
	if nilAuth.Enabled() {
		t.Error("nil enabled")
	}
}

// fromContext is the identity Require attached to a request's context.
func fromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// TestRequire runs Require behind a real listener on loopback: the TCP
// peer of every request is 127.0.0.1, which is a trusted proxy in one
// server and not in the other.
func TestRequire(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	secret := "IBAN DE89370400440532013000"
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := fromContext(r.Context())
		if !ok {
			t.Error("no identity in the context")
		}
		fmt.Fprintf(w, "%s %s %s %s", id.Name, id.Role, id.Method, secret)
	})
	tokens := WithTokens(Token{"alice", RoleReader, aliceTok}, Token{"bob", RoleOperator, bobTok})
	mk := func(need Role, proxies string) *httptest.Server {
		ps, err := ParseProxies([]string{proxies})
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(tokens, WithTrustedProxy("x-forwarded-user", ps, ""), WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(a.Require(need, next))
		t.Cleanup(s.Close)
		return s
	}
	trusting := mk(RoleReader, "127.0.0.0/8") // the test's own address is the proxy
	distrusting := mk(RoleReader, "10.0.0.0/8")
	operators := mk(RoleOperator, "127.0.0.1")

	cases := []struct {
		name      string
		srv       *httptest.Server
		headers   map[string]string
		code      int
		body      string
		challenge string
	}{
		{"no credentials", distrusting, nil, 401, "authentication required (no credentials)", `Bearer realm="onceflight"`},
		{"wrong token", distrusting, map[string]string{"Authorization": "Bearer " + aliceTok + "x"}, 401, "unknown bearer token", `Bearer realm="onceflight", error="invalid_token"`},
		{"basic", distrusting, map[string]string{"Authorization": "Basic YWxpY2U6eA=="}, 401, "not a bearer token", `Bearer realm="onceflight"`},
		{"valid token", distrusting, map[string]string{"Authorization": "Bearer " + aliceTok}, 200, "alice reader token", ""},
		{"scheme any case", distrusting, map[string]string{"Authorization": "bearer  " + bobTok}, 200, "bob operator token", ""},
		{"proxy header from an untrusted address", distrusting, map[string]string{"X-Forwarded-User": "mallory"}, 401, "no credentials", `Bearer realm="onceflight"`},
		{"proxy header with a token, untrusted", distrusting, map[string]string{"X-Forwarded-User": "mallory", "Authorization": "Bearer " + aliceTok}, 200, "alice reader token", ""},
		{"proxy header from the trusted proxy", trusting, map[string]string{"X-Forwarded-User": "carol@example.com"}, 200, "carol@example.com reader proxy", ""},
		{"empty proxy header", trusting, map[string]string{"X-Forwarded-User": " "}, 401, "malformed user header", `Bearer realm="onceflight"`},
		{"proxy header joining two users", trusting, map[string]string{"X-Forwarded-User": "mallory, carol@example.com"}, 401, "malformed user header", `Bearer realm="onceflight"`},
		{"trusted proxy without a user", trusting, nil, 401, "no credentials", `Bearer realm="onceflight"`},
		{"reader where operator is needed", operators, map[string]string{"Authorization": "Bearer " + aliceTok}, 403, "alice has role reader; this needs operator", ""},
		{"proxy user where operator is needed", operators, map[string]string{"X-Forwarded-User": "carol"}, 403, "carol has role reader", ""},
		{"operator", operators, map[string]string{"Authorization": "Bearer " + bobTok}, 200, "bob operator token", ""},
	}
	for _, c := range cases {
		req, err := http.NewRequest(http.MethodGet, c.srv.URL+"/v1/executions/k", nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.body) {
			t.Errorf("%s: %d %q, want %d containing %q", c.name, resp.StatusCode, b, c.code, c.body)
		}
		if got := resp.Header.Get("WWW-Authenticate"); got != c.challenge {
			t.Errorf("%s: WWW-Authenticate %q, want %q", c.name, got, c.challenge)
		}
		if c.code != 200 && (strings.Contains(string(b), secret) || resp.Header.Get("Cache-Control") != "no-store") {
			t.Errorf("%s: refused answer %q, Cache-Control %q", c.name, b, resp.Header.Get("Cache-Control"))
		}
	}
	for _, tok := range []string{aliceTok, bobTok} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("a token is in the log:\n%s", logs.String())
		}
	}
	if !strings.Contains(logs.String(), `identity=alice`) || !strings.Contains(logs.String(), `reason="unknown bearer token"`) {
		t.Errorf("the log lacks the reads and refusals:\n%s", logs.String())
	}
}

// TestRequireDisabled: without a method Require lets every request
// through to the handler (serve decides where that is allowed: only on
// loopback) and still logs each read, naming no identity.
func TestRequireDisabled(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	disabled, err := New(WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := fromContext(r.Context()); ok {
			t.Error("an identity without authentication")
		}
		fmt.Fprint(w, "the record")
	})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/executions/k?entity=e", nil)
	req.Host = "127.0.0.1:8080"
	disabled.Require(RoleOperator, h).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "the record" {
		t.Errorf("disabled: %d %q, want the handler's answer", rec.Code, rec.Body.String())
	}
	if want := `msg="http: record access" identity="" by=none method=GET path=/v1/executions/k query="entity=e" remote=192.0.2.1:1234`; !strings.Contains(logs.String(), want) {
		t.Errorf("the log lacks %s:\n%s", want, logs.String())
	}
	var nilAuth *Authenticator
	// httptest.NewRequest addresses example.com: a page's name, rebound to
	// 127.0.0.1, is refused; loopback names are served.
	for host, want := range map[string]int{"example.com": 403, "rebind.attacker.test:8080": 403, "127.0.0.1.nip.io:8080": 403,
		"127.0.0.1:8080": 200, "localhost:8080": 200, "LOCALHOST": 200, "[::1]:8080": 200, "console.localhost:8090": 200, "127.9.9.9": 200} {
		rec = httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/executions/k", nil)
		req.Host = host
		nilAuth.Require(RoleReader, h).ServeHTTP(rec, req)
		if rec.Code != want || (want == 403 && (strings.Contains(rec.Body.String(), "the record") || !strings.Contains(rec.Body.String(), "DNS rebinding"))) {
			t.Errorf("Host %s without authentication: %d %s, want %d", host, rec.Code, rec.Body.String(), want)
		}
	}
	a := nilAuth.With(WithTokens(Token{"ingress", RoleReader, "t0ken"}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer t0ken")
	if id, err := a.Authenticate(r); err != nil || id.Name != "ingress" {
		t.Errorf("With on nil: %v %v", id, err)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:80": true, "127.1.2.3:80": true, "[::1]:80": true, "localhost:80": true,
		":80": false, "0.0.0.0:80": false, "[::]:80": false, "10.0.0.1:80": false, "example.com:80": false, "nonsense": false} {
		if Loopback(addr) != want {
			t.Errorf("Loopback(%q) = %v", addr, !want)
		}
	}
}
