package httpconn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/connectors/connectortest"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
)

func newConn(t *testing.T, cfg httpconn.Config) *httpconn.Connector {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	c, err := httpconn.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func req(key, data string) connectors.Request {
	return connectors.Request{Action: "a", Entity: "e/1", Key: key, Attempt: 1, Data: json.RawMessage(data)}
}

// TestRequestShape: method, URL template with path and query escaping, a
// form body in bracket style, a JSON template that data cannot break out
// of, and the idempotency header's configured name.
func TestRequestShape(t *testing.T) {
	var got struct {
		method, path, query, ctype, body, idem string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.method, got.path, got.query, got.ctype, got.body, got.idem = r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Content-Type"), string(b), r.Header.Get("X-Request-Key")
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	data := `{"order":{"id":"A/1 ?&"},"amount":500,"tags":["x","y"],"note":"say \"hi\"}, \"admin\": true"}`
	for _, c := range []struct {
		name string
		url  string
		api  httpconn.API
		want [6]string
	}{
		{"form, PUT, templated path and query", srv.URL + "/orders/{data.order.id}/refunds?entity={entity}&k={key}",
			httpconn.API{Method: "put", Body: httpconn.BodyForm, IdempotencyHeader: "X-Request-Key"},
			[6]string{"PUT", "/orders/A%2F1%20%3F&/refunds", "entity=e%2F1&k=..", "application/x-www-form-urlencoded",
				"amount=500&note=say+%22hi%22%7D%2C+%22admin%22%3A+true&order%5Bid%5D=A%2F1+%3F%26&tags%5B0%5D=x&tags%5B1%5D=y", ".."}},
		{"JSON template", srv.URL + "/notes",
			httpconn.API{Body: httpconn.BodyTemplate, BodyTemplate: `{"text": "{data.note}", "n": {data.amount}, "order": {data.order}}`, IdempotencyHeader: "X-Request-Key"},
			[6]string{"POST", "/notes", "", "application/json", `{"text": "say \"hi\"}, \"admin\": true", "n": 500, "order": {"id":"A/1 ?&"}}`, ".."}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := newConn(t, httpconn.Config{URL: c.url, API: c.api})
			if r := conn.Execute(context.Background(), req("..", data)); r.Kind != connectors.Succeeded {
				t.Fatalf("execute: %+v", r)
			}
			if g := [6]string{got.method, got.path, got.query, got.ctype, got.body, got.idem}; g != c.want {
				t.Errorf("got  %q\nwant %q", g, c.want)
			}
			if c.api.Body == httpconn.BodyTemplate {
				var v map[string]any
				if err := json.Unmarshal([]byte(got.body), &v); err != nil || v["admin"] != nil {
					t.Errorf("template body %s: %v (data must not add fields)", got.body, err)
				}
			}
		})
	}
	t.Run("missing data field is rejected, not sent", func(t *testing.T) {
		got.method = ""
		conn := newConn(t, httpconn.Config{URL: srv.URL + "/orders/{data.nope}"})
		r := conn.Execute(context.Background(), req("k", data))
		if r.Kind != connectors.Rejected || !strings.Contains(r.Message, "has no nope") || got.method != "" {
			t.Errorf("execute: %+v, sent %q", r, got.method)
		}
	})
}

func TestParseTemplateErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://x/{dta.id}", "unknown template field {dta.id}"},
		{"http://x/{key.x}", "only data has fields"},
		{"http://x/{data..id}", "empty path step"},
	} {
		if _, err := httpconn.ParseTemplate(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.in, err, c.want)
		}
	}
	tm, err := httpconn.ParseTemplate(`{"a": {data.a.b}, "k": "{key}"}`)
	if err != nil || len(tm.DataPaths()) != 1 || strings.Join(tm.DataPaths()[0], ".") != "a.b" {
		t.Errorf("template: %v %v", tm, err)
	}
}

// TestLookupRule: only an answer on which exactly one of found and
// not_found holds decides; a 500, an HTML page, both holding are unknown.
func TestLookupRule(t *testing.T) {
	var answer atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answer.Load().([2]string)
		code := map[string]int{"200": 200, "500": 500, "404": 404}[a[0]]
		w.WriteHeader(code)
		_, _ = w.Write([]byte(a[1]))
	}))
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/x", API: httpconn.API{Confirm: &httpconn.Confirm{
		URL: srv.URL + "/x?key={key}", Found: "status == 200 && size(body.data) > 0", NotFound: "status == 200 && size(body.data) == 0",
		Result: "body.data[0]",
	}}})
	for _, c := range []struct {
		status, body string
		want         connectors.Kind
		result       string
	}{
		{"200", `{"data":[{"id":"re_1"}]}`, connectors.Succeeded, `{"id":"re_1"}`},
		{"200", `{"data":[]}`, connectors.NotFound, ""},
		{"500", `{"data":[]}`, connectors.Ambiguous, ""},
		{"200", `<html>maintenance</html>`, connectors.Ambiguous, ""},
		{"404", ``, connectors.Ambiguous, ""},
	} {
		answer.Store([2]string{c.status, c.body})
		r := conn.Confirm(context.Background(), req("k", `{}`))
		if r.Kind != c.want || string(r.Result) != c.result {
			t.Errorf("%s %s: %+v, want %v %s", c.status, c.body, r, c.want, c.result)
		}
	}
	both := newConn(t, httpconn.Config{URL: srv.URL + "/x", API: httpconn.API{Confirm: &httpconn.Confirm{URL: srv.URL + "/x/{key}", Found: "status == 200", NotFound: "true"}}})
	answer.Store([2]string{"200", `{}`})
	if r := both.Confirm(context.Background(), req("k", `{}`)); r.Kind != connectors.Ambiguous || !strings.Contains(r.Message, "both") {
		t.Errorf("both hold: %+v", r)
	}
}

// TestLookupChecksTheKey: a found rule can require the listed object to
// be the one asked about (key is a CEL variable). An API that ignores the
// filter and lists other objects then gets "unknown", not "found", and an
// empty list is still "not found".
func TestLookupChecksTheKey(t *testing.T) {
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(body.Load().(string)))
	}))
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/x", API: httpconn.API{Confirm: &httpconn.Confirm{
		URL:      srv.URL + "/x?ref={key}",
		Found:    "status == 200 && body.data.exists(m, m.ref == key && m.to == entity)",
		NotFound: "status == 200 && size(body.data) == 0",
	}}})
	for _, c := range []struct {
		body string
		want connectors.Kind
	}{
		{`{"data":[{"ref":"other-key","to":"e/1"}]}`, connectors.Ambiguous}, // the filter ignored: not ours
		{`{"data":[{"ref":"k","to":"e/2"}]}`, connectors.Ambiguous},         // another entity's
		{`{"data":[{"ref":"other-key"},{"ref":"k","to":"e/1"}]}`, connectors.Succeeded},
		{`{"data":[]}`, connectors.NotFound},
	} {
		body.Store(c.body)
		if r := conn.Confirm(context.Background(), req("k", `{}`)); r.Kind != c.want {
			t.Errorf("%s: %+v, want %v", c.body, r, c.want)
		}
	}
}

// TestSearchLookupNeedsFound: a lookup that searches by a query cannot
// keep the default found rule, under which a 200 {"data": []} — no such
// object — would confirm the effect. A lookup of one object by its path
// may keep the defaults (200 found, 404 not found).
func TestSearchLookupNeedsFound(t *testing.T) {
	const base = "http://127.0.0.1:1"
	for _, c := range []struct {
		name string
		cfg  httpconn.Config
		want string // "" for no error
	}{
		{"confirm searching with the default found", httpconn.Config{URL: base + "/r", API: httpconn.API{Confirm: &httpconn.Confirm{URL: base + "/r?idempotency_key={key}"}}},
			`confirm.found: the lookup searches by a query`},
		{"only not_found written", httpconn.Config{URL: base + "/r", API: httpconn.API{Confirm: &httpconn.Confirm{URL: base + "/r?k={key}", NotFound: "status == 200 && size(body.data) == 0"}}},
			`confirm.found: the lookup searches by a query`},
		{"confirm_url searching, with credentials", httpconn.Config{URL: base + "/r", ConfirmURL: base + "/r?k={key}", API: httpconn.API{Headers: map[string]string{"X-Team": "a"}}},
			`confirm_url: the lookup searches by a query`},
		{"found written", httpconn.Config{URL: base + "/r", API: httpconn.API{Confirm: &httpconn.Confirm{URL: base + "/r?k={key}", Found: "status == 200"}}}, ""},
		{"one object by its path", httpconn.Config{URL: base + "/r", API: httpconn.API{Confirm: &httpconn.Confirm{URL: base + "/r/{key}?expand=all"}}}, ""},
		{"Onceflight's own protocol", httpconn.Config{URL: base + "/r", ConfirmURL: base + "/r?k={key}"}, ""},
	} {
		_, err := httpconn.New(c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestSecretsRedacted: an API that echoes the request's headers back in an
// error and in a success body does not get the secrets into a message or a
// recorded result.
func TestSecretsRedacted(t *testing.T) {
	const token, pass = "tok-9f8e7d6c5b4a", "p@ss\"word-42"
	t.Setenv("TEST_TOKEN", token)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pass"), []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echo, _ := json.Marshal(map[string]any{"message": "you sent " + r.Header.Get("X-Token") + " and " + r.Header.Get("Authorization"), "headers": r.Header})
		if fail.Load() {
			w.WriteHeader(http.StatusUnauthorized)
		}
		_, _ = w.Write(echo)
	}))
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL, ConfirmURL: srv.URL + "/{key}", API: httpconn.API{
		Headers:   map[string]string{"X-Token": "${env:TEST_TOKEN}"},
		BasicAuth: &httpconn.BasicAuth{Username: "u", Password: "${file:" + filepath.Join(dir, "pass") + "}"},
	}})
	ok := conn.Execute(context.Background(), req("k", `{}`))
	conf := conn.Confirm(context.Background(), req("k", `{}`))
	fail.Store(true)
	bad := conn.Execute(context.Background(), req("k", `{}`))
	if ok.Kind != connectors.Succeeded || conf.Kind != connectors.Succeeded || bad.Kind != connectors.Rejected {
		t.Fatalf("answers %+v %+v %+v", ok, conf, bad)
	}
	for _, r := range []connectors.Result{ok, conf, bad} {
		text := r.Message + string(r.Result)
		if !strings.Contains(text, httpconn.Redacted) {
			t.Errorf("nothing redacted in %q", text)
		}
		noSecret(t, "answer", text, token, pass, "dTpwQHNzIndvcmQtNDI=" /* base64 u:pass */)
		if len(r.Result) > 0 && !json.Valid(r.Result) {
			t.Errorf("redacted result is not JSON: %s", r.Result)
		}
	}
}

// TestMissingSecret: an unset variable or a missing file stops New with
// its name, and the value of another secret is not in the message.
func TestMissingSecret(t *testing.T) {
	t.Setenv("SET_ONE", "value-that-is-secret")
	for _, c := range []struct {
		api  httpconn.API
		want string
	}{
		{httpconn.API{Headers: map[string]string{"Authorization": "Bearer ${env:UNSET_VAR_FOR_TEST}", "X-A": "${env:SET_ONE}"}}, "headers.Authorization: environment variable UNSET_VAR_FOR_TEST is not set"},
		{httpconn.API{BasicAuth: &httpconn.BasicAuth{Username: "u", Password: "${file:/nonexistent/secret}"}}, "basic_auth.password: secret file: open /nonexistent/secret"},
		{httpconn.API{Headers: map[string]string{"X-B": "${evn:SET_ONE}"}}, "is not a secret reference"},
		{httpconn.API{TLS: httpconn.TLS{CAFile: "/nonexistent/ca.pem"}}, "tls.ca_file: read CA bundle"},
		{httpconn.API{Signing: &httpconn.Signing{Secret: "${env:SET_ONE}"}}, "not a Standard Webhooks secret"},
	} {
		_, err := httpconn.New(httpconn.Config{URL: "http://127.0.0.1:1/x", API: c.api})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want %q", err, c.want)
		}
		if err != nil {
			noSecret(t, "error", err.Error(), "value-that-is-secret")
		}
	}
}

// TestTLSSettings: a private CA and a client certificate from files.
func TestTLSSettings(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		_, _ = w.Write([]byte(`{"cn":"` + r.TLS.PeerCertificates[0].Subject.CommonName + `"}`))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are expected
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writePEM(t, ca, "CERTIFICATE", srv.Certificate().Raw)
	cert, key := clientCert(t, dir)

	withCert := newConn(t, httpconn.Config{URL: srv.URL, API: httpconn.API{TLS: httpconn.TLS{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "example.com"}}})
	if r := withCert.Execute(context.Background(), req("k", `{}`)); r.Kind != connectors.Succeeded || !strings.Contains(string(r.Result), `"cn":"onceflight-test"`) {
		t.Errorf("with CA and client certificate: %+v", r)
	}
	// Without the CA the server is not trusted: nothing is sent.
	noCA := newConn(t, httpconn.Config{URL: srv.URL, API: httpconn.API{TLS: httpconn.TLS{CertFile: cert, KeyFile: key}}})
	if r := noCA.Execute(context.Background(), req("k", `{}`)); r.Kind != connectors.Unavailable || !strings.Contains(r.Message, "certificate") {
		t.Errorf("without the CA: %+v", r)
	}
	// The wrong server name fails verification too.
	wrongName := newConn(t, httpconn.Config{URL: srv.URL, API: httpconn.API{TLS: httpconn.TLS{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "other.test"}}})
	if r := wrongName.Execute(context.Background(), req("k", `{}`)); r.Kind != connectors.Unavailable {
		t.Errorf("wrong server name: %+v", r)
	}
	if _, err := httpconn.New(httpconn.Config{URL: srv.URL, API: httpconn.API{TLS: httpconn.TLS{CertFile: ca, KeyFile: ca}}}); err == nil || !strings.Contains(err.Error(), "tls.cert_file") {
		t.Errorf("unreadable key pair: %v", err)
	}
	// On a plain-http URL the settings would be dropped without a word.
	plain := strings.Replace(srv.URL, "https:", "http:", 1)
	for _, cfg := range []httpconn.Config{
		{URL: plain, API: httpconn.API{TLS: httpconn.TLS{CAFile: ca}}},
		{URL: srv.URL, API: httpconn.API{TLS: httpconn.TLS{CAFile: ca}, Confirm: &httpconn.Confirm{URL: plain + "/{key}"}}},
	} {
		if _, err := httpconn.New(cfg); err == nil || !strings.Contains(err.Error(), "tls: ") || !strings.Contains(err.Error(), "is http://, where tls settings do not apply") {
			t.Errorf("tls with %s / %v: %v", cfg.URL, cfg.API.Confirm, err)
		}
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func clientCert(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "onceflight-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, key, "PRIVATE KEY", kder)
	return cert, key
}

// TestOAuth2ClientCredentials: one token for many requests, sent as a
// bearer token on Execute and Confirm; a token endpoint that refuses is
// "not sent", and the client secret is in no message.
func TestOAuth2ClientCredentials(t *testing.T) {
	const secret = "client-secret-5d4c3b2a"
	t.Setenv("OAUTH_SECRET", secret)
	var tokens atomic.Int64
	var refuse, down atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		id, sec, ok := r.BasicAuth()
		if !ok {
			_ = r.ParseForm()
			id, sec = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		if refuse.Load() || id != "onceflight" || sec != secret {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		n := tokens.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"at-` + string(rune('0'+n)) + `-abcdef","token_type":"Bearer","expires_in":3600}`))
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer at-1-abcdef" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	api := httpconn.API{OAuth2: &httpconn.OAuth2{TokenURL: srv.URL + "/token", ClientID: "onceflight", ClientSecret: "${env:OAUTH_SECRET}", Scopes: []string{"refunds"}}}
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/api/x", ConfirmURL: srv.URL + "/api/x/{key}", API: api})
	for range 3 {
		if r := conn.Execute(context.Background(), req("k", `{}`)); r.Kind != connectors.Succeeded {
			t.Fatalf("execute: %+v", r)
		}
	}
	if r := conn.Confirm(context.Background(), req("k", `{}`)); r.Kind != connectors.Succeeded {
		t.Fatalf("confirm: %+v", r)
	}
	if tokens.Load() != 1 {
		t.Errorf("%d tokens fetched for 4 requests, want 1", tokens.Load())
	}
	// A token endpoint that refuses the client (a wrong secret) is a
	// failure waiting will not fix: rejected, nothing sent to the API.
	refuse.Store(true)
	fresh := newConn(t, httpconn.Config{URL: srv.URL + "/api/x", API: api})
	r := fresh.Execute(context.Background(), req("k", `{}`))
	if r.Kind != connectors.Rejected || !strings.Contains(r.Message, "not sent: oauth2 token") || !strings.Contains(r.Message, "invalid_client") {
		t.Errorf("refused token: %+v", r)
	}
	noSecret(t, "message", r.Message, secret)
	// One that is down is "not done": retried.
	down.Store(true)
	r = newConn(t, httpconn.Config{URL: srv.URL + "/api/x", API: api}).Execute(context.Background(), req("k", `{}`))
	if r.Kind != connectors.Unavailable || !strings.Contains(r.Message, "oauth2 token") {
		t.Errorf("token endpoint down: %+v", r)
	}
}

// TestOAuth2TokenRevoked: when the API refuses a token before its
// expires_in (revoked), Execute fetches a new one and sends the request
// once more — one effect, no failure — instead of failing every command
// until the old token expires; an API that refuses every token is the
// API's 401 after one renewal, not a loop. A lookup refused the same way
// is unknown and renews the token for the next one.
func TestOAuth2TokenRevoked(t *testing.T) {
	t.Setenv("OAUTH_SECRET", "s")
	var mu sync.Mutex
	issued, valid, effects := 0, "", 0
	refuseAll := false
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		issued++
		valid = "at-" + string(rune('0'+issued))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"` + valid + `","token_type":"Bearer","expires_in":3600}`))
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refuseAll || r.Header.Get("Authorization") != "Bearer "+valid {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"message":"invalid token"}`))
			return
		}
		if r.Method == http.MethodPost {
			effects++
		}
		_, _ = w.Write([]byte(`{"data":[{"id":"x"}]}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	revoke := func() { mu.Lock(); valid = "revoked"; mu.Unlock() }
	count := func() (int, int) { mu.Lock(); defer mu.Unlock(); return issued, effects }
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/api/x", API: httpconn.API{
		OAuth2:  &httpconn.OAuth2{TokenURL: srv.URL + "/token", ClientID: "c", ClientSecret: "${env:OAUTH_SECRET}"},
		Confirm: &httpconn.Confirm{URL: srv.URL + "/api/x?k={key}", Found: "status == 200 && size(body.data) > 0", NotFound: "status == 200 && size(body.data) == 0"},
	}})
	if r := conn.Execute(context.Background(), req("k1", `{}`)); r.Kind != connectors.Succeeded {
		t.Fatalf("first: %+v", r)
	}
	revoke()
	if r := conn.Execute(context.Background(), req("k2", `{}`)); r.Kind != connectors.Succeeded {
		t.Fatalf("after the revocation: %+v", r)
	}
	if i, e := count(); i != 2 || e != 2 {
		t.Errorf("%d tokens, %d effects; want 2 and 2", i, e)
	}
	revoke()
	if r := conn.Confirm(context.Background(), req("k2", `{}`)); r.Kind != connectors.Ambiguous {
		t.Errorf("lookup with a revoked token: %+v, want unknown", r)
	}
	if r := conn.Confirm(context.Background(), req("k2", `{}`)); r.Kind != connectors.Succeeded {
		t.Errorf("the next lookup, with a new token: %+v", r)
	}
	mu.Lock()
	refuseAll = true
	mu.Unlock()
	i0, e0 := count()
	r := conn.Execute(context.Background(), req("k3", `{}`))
	if i, e := count(); r.Kind != connectors.Rejected || !strings.Contains(r.Message, "HTTP 401") || i != i0+1 || e != e0 {
		t.Errorf("an API refusing every token: %+v after %d more tokens, %d more effects; want rejected after one renewal", r, i-i0, e-e0)
	}
}

// TestConformanceRealAPI runs the connector conformance suite on a
// connector configured for a real API — bearer credentials, form body, its
// own idempotency header, and a list lookup judged by CEL — so the new
// request and confirmation paths keep every property the suite checks
// (deadline, cancellation, no blind retry, confirmation before a second
// execution).
func TestConformanceRealAPI(t *testing.T) {
	t.Setenv("CONFORMANCE_KEY", "conformance-key-0192837465")
	connectortest.Run(t, connectortest.Features{Confirm: true}, func(t *testing.T) connectortest.Harness {
		var mu sync.Mutex
		effects, ambiguous := map[string]int{}, map[string]bool{}
		mux := http.NewServeMux()
		mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer conformance-key-0192837465" || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			key := r.Header.Get("X-Op-Key")
			mu.Lock()
			effects[key]++
			amb := ambiguous[key]
			delete(ambiguous, key)
			mu.Unlock()
			if amb {
				w.WriteHeader(http.StatusGatewayTimeout)
				return
			}
			_, _ = w.Write([]byte(`{"id":"ch_1"}`))
		})
		mux.HandleFunc("GET /charges", func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			n := effects[r.URL.Query().Get("op")]
			mu.Unlock()
			data := "[]"
			if n > 0 {
				data = `[{"id":"ch_1"}]`
			}
			_, _ = w.Write([]byte(`{"data":` + data + `}`))
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		conn := newConn(t, httpconn.Config{URL: srv.URL + "/charges", API: httpconn.API{
			Body: httpconn.BodyForm, IdempotencyHeader: "X-Op-Key",
			Headers: map[string]string{"Authorization": "Bearer ${env:CONFORMANCE_KEY}"},
			Confirm: &httpconn.Confirm{URL: srv.URL + "/charges?op={key}", Found: "status == 200 && size(body.data) > 0", NotFound: "status == 200 && size(body.data) == 0"},
		}})
		return connectortest.Harness{
			Conn: conn,
			Effects: func(key string) int {
				mu.Lock()
				defer mu.Unlock()
				return effects[key]
			},
			ApplyThenAmbiguous: func(key string) {
				mu.Lock()
				defer mu.Unlock()
				ambiguous[key] = true
			},
		}
	})
}

// BenchmarkExecuteShape compares Execute of Onceflight's own protocol with
// Execute of a real API's shape (form body from decoded data, a header
// from a secret, rejected_when and a result mapping in CEL) against the
// same loopback server: the cost of the shape per request.
func BenchmarkExecuteShape(b *testing.B) {
	b.Setenv("BENCH_KEY", "bench-key-0123456789")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"id":"re_1","status":"succeeded","amount":500}`))
	}))
	defer srv.Close()
	data := `{"charge":"ch_1","amount":500,"metadata":{"order_id":"A-1042"}}`
	for _, c := range []struct {
		name string
		api  httpconn.API
	}{
		{"own-protocol", httpconn.API{}},
		{"real-api", httpconn.API{Body: httpconn.BodyForm, Headers: map[string]string{"Authorization": "Bearer ${env:BENCH_KEY}"},
			RejectedWhen: `body.status == "failed"`, Result: `{"refund_id": body.id, "status": body.status}`}},
	} {
		b.Run(c.name, func(b *testing.B) {
			conn, err := httpconn.New(httpconn.Config{URL: srv.URL + "/v1/refunds", Timeout: 5 * time.Second, API: c.api})
			if err != nil {
				b.Fatal(err)
			}
			r := req("k", data)
			b.ReportAllocs()
			for b.Loop() {
				if res := conn.Execute(context.Background(), r); res.Kind != connectors.Succeeded {
					b.Fatal(res)
				}
			}
		})
	}
}

// TestRulesOnACutBody: a rule that reads the body decides nothing on a
// body cut short (it broke off, or it is longer than the connector reads):
// what it says of the part may be false of the whole. A 2xx on which
// rejected_when holds only for the part is ambiguous (confirmed), not
// failed — the status said the effect happened; a lookup on which
// not_found holds only for the part is unknown, not "not found" — which
// would execute the key again. A rule that reads only the status or the
// header still decides on a cut body.
func TestRulesOnACutBody(t *testing.T) {
	pad := strings.Repeat("x", 300<<10)
	var answer atomic.Value // "empty": a 201 that breaks off before its body; "long": a 300 KiB body
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch answer.Load().(string) {
		case "empty":
			hangUp(w, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
		case "long":
			if r.Method == http.MethodGet { // the lookup: a text listing with the key at its end
				fmt.Fprint(w, pad+"\n"+r.URL.Query().Get("ref")+"\n")
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"r-1","pad":%q}`, pad)
		}
	}))
	defer srv.Close()
	for _, client := range []string{httpconn.ClientFast, httpconn.ClientNetHTTP} {
		for _, tc := range []struct {
			answer, rule string
			want         connectors.Kind
		}{
			{"empty", `!has(body.id)`, connectors.Ambiguous},
			{"long", `!has(body.id)`, connectors.Ambiguous},
			{"long", `!(body.id == "r-1")`, connectors.Ambiguous},
			{"empty", `status != 201`, connectors.Succeeded},
			{"long", `headers["content-type"] == "text/html"`, connectors.Succeeded},
		} {
			t.Run(client+" "+tc.answer+" "+tc.rule, func(t *testing.T) {
				answer.Store(tc.answer)
				c := newConn(t, httpconn.Config{URL: srv.URL + "/refunds", API: httpconn.API{RejectedWhen: tc.rule}, Transport: httpconn.Transport{Client: client}})
				if res := c.Execute(context.Background(), req("k", `{}`)); res.Kind != tc.want {
					t.Fatalf("201 with a cut body, rejected_when %s: %v %q, want %v", tc.rule, res.Kind, res.Message, tc.want)
				}
			})
		}
	}
	answer.Store("long")
	for _, tc := range []struct {
		found, notFound string
		want            connectors.Kind
	}{
		{`status == 200 && body.contains(key)`, `status == 200 && !body.contains(key)`, connectors.Ambiguous},
		{`status == 200`, `status == 404`, connectors.Succeeded},
	} {
		c := newConn(t, httpconn.Config{URL: srv.URL + "/refunds", API: httpconn.API{Confirm: &httpconn.Confirm{
			URL: srv.URL + "/refunds?ref={key}", Found: tc.found, NotFound: tc.notFound}}})
		if res := c.Confirm(context.Background(), req("k-1", `{}`)); res.Kind != tc.want {
			t.Errorf("lookup answering 300 KiB with the key at its end, not_found %s: %v %q, want %v", tc.notFound, res.Kind, res.Message, tc.want)
		}
	}
}

// TestStatusesReclassify: an API's own meaning of a status (statuses)
// changes what Execute makes of it on both clients, and only that code.
func TestStatusesReclassify(t *testing.T) {
	var code atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code.Load() == http.StatusConflict {
			w.Header().Set("Retry-After", "3")
		}
		w.WriteHeader(int(code.Load()))
		fmt.Fprint(w, `{"error":"x"}`)
	}))
	defer srv.Close()
	st := httpconn.Statuses{Ambiguous: []int{503, 404}, NotDone: []int{409}}
	for _, client := range []string{httpconn.ClientFast, httpconn.ClientNetHTTP} {
		for _, tc := range []struct {
			code       int
			plain, own connectors.Kind
		}{
			{503, connectors.Unavailable, connectors.Ambiguous}, // a proxy's 503 after an upstream reset
			{404, connectors.Rejected, connectors.Ambiguous},
			{409, connectors.Rejected, connectors.Unavailable}, // Stripe's key in flight
			{400, connectors.Rejected, connectors.Rejected},    // not listed: the protocol's class
			{429, connectors.Unavailable, connectors.Unavailable},
			{500, connectors.Ambiguous, connectors.Ambiguous},
		} {
			code.Store(int32(tc.code))
			plain := newConn(t, httpconn.Config{URL: srv.URL, Transport: httpconn.Transport{Client: client}})
			own := newConn(t, httpconn.Config{URL: srv.URL, API: httpconn.API{Statuses: st}, Transport: httpconn.Transport{Client: client}})
			if res := plain.Execute(context.Background(), req("k", `{}`)); res.Kind != tc.plain {
				t.Errorf("%s: HTTP %d without statuses: %v %q, want %v", client, tc.code, res.Kind, res.Message, tc.plain)
			}
			res := own.Execute(context.Background(), req("k", `{}`))
			if res.Kind != tc.own {
				t.Errorf("%s: HTTP %d with statuses %+v: %v %q, want %v", client, tc.code, st, res.Kind, res.Message, tc.own)
			}
			if want := st.ClassifyStatus(tc.code); want != tc.own {
				t.Errorf("Statuses.ClassifyStatus(%d) = %v, Execute %v: `onceflight actions` would describe another answer", tc.code, want, tc.own)
			}
			if tc.code == http.StatusConflict && res.RetryAfter != 3*time.Second {
				t.Errorf("%s: a not_done 409 with Retry-After: 3: RetryAfter %v, want 3s", client, res.RetryAfter)
			}
			if want := tc.code == http.StatusConflict; res.InFlight != want {
				t.Errorf("%s: HTTP %d with statuses %+v: InFlight %v, want %v (only a not_done code says an earlier request may still run)", client, tc.code, st, res.InFlight, want)
			}
		}
	}
}

func TestStatusesRefused(t *testing.T) {
	for _, tc := range []struct {
		st   httpconn.Statuses
		want string
	}{
		{httpconn.Statuses{Ambiguous: []int{200}}, "statuses.ambiguous: 200 cannot be reclassified"},
		{httpconn.Statuses{NotDone: []int{101}}, "statuses.not_done: 101 cannot be reclassified"},
		{httpconn.Statuses{Ambiguous: []int{600, 42}}, "statuses.ambiguous: 600 is not an HTTP status code; 42 is not"},
		{httpconn.Statuses{Ambiguous: []int{503}, NotDone: []int{503}}, "statuses.not_done: 503 is also in statuses.ambiguous"},
	} {
		errs := httpconn.Check(httpconn.Config{URL: "https://api.example/x", API: httpconn.API{Statuses: tc.st}})
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want one error containing %q", tc.st, errs, tc.want)
		}
	}
}
