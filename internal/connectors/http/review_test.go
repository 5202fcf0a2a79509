package httpconn_test

// Tests from a review of the connector against the ways real APIs
// misbehave (round 25): each one failed before the change it names.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/onceflight/onceflight/connectors"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
)

// TestOAuth2TokenRedirectNotFollowed: a token endpoint that answers with a
// redirect (a moved or compromised IdP, a proxy's login) must not get the
// client credentials sent on to the redirect's target. net/http follows a
// 307 by posting the body again — with the client secret in it when the
// oauth2 package falls back to sending it in the form — and keeps the
// Authorization header for the same host name on another port or scheme.
// The redirect is an answer that gives no token: not sent, retried.
func TestOAuth2TokenRedirectNotFollowed(t *testing.T) {
	const secret = "client-secret-9f8e7d6c"
	t.Setenv("OAUTH_SECRET", secret)
	var mu sync.Mutex
	var leaked []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		leaked = append(leaked, r.Header.Get("Authorization")+" "+string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer other.Close()
	// localhost is another host name than 127.0.0.1 for net/http, which
	// then drops Authorization but still re-posts the form.
	elsewhere := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	var apiCalls int
	for _, target := range []string{elsewhere, other.URL} {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target+"/token", http.StatusTemporaryRedirect)
		})
		mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			apiCalls++
			mu.Unlock()
		})
		srv := httptest.NewServer(mux)
		api := httpconn.API{OAuth2: &httpconn.OAuth2{TokenURL: srv.URL + "/token", ClientID: "onceflight", ClientSecret: "${env:OAUTH_SECRET}"}}
		r := newConn(t, httpconn.Config{URL: srv.URL + "/api/x", API: api}).Execute(context.Background(), req("k", `{}`))
		srv.Close()
		if r.Kind != connectors.Unavailable || !strings.Contains(r.Message, "not sent: oauth2 token") {
			t.Errorf("token endpoint redirecting to %s: %+v, want unavailable, not sent", target, r)
		}
		noSecret(t, "message", r.Message, secret)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, got := range leaked {
		t.Errorf("the redirect's target got %q", got)
	}
	if apiCalls != 0 {
		t.Errorf("%d requests reached the API without a token", apiCalls)
	}
}

// TestOAuth2RenewalKeepsAnAmbiguous401: an action that lists 401 among
// statuses.ambiguous (a gateway that answers 401 after forwarding, an API
// whose 401 may come late) says a 401 may follow the effect: it is
// confirmed, never sent again blind — not even with a renewed token.
func TestOAuth2RenewalKeepsAnAmbiguous401(t *testing.T) {
	t.Setenv("OAUTH_SECRET", "s")
	var mu sync.Mutex
	posts := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"at-1","token_type":"Bearer","expires_in":3600}`))
	})
	mux.HandleFunc("POST /api/x", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/api/x", API: httpconn.API{
		OAuth2:   &httpconn.OAuth2{TokenURL: srv.URL + "/token", ClientID: "c", ClientSecret: "${env:OAUTH_SECRET}"},
		Statuses: httpconn.Statuses{Ambiguous: []int{http.StatusUnauthorized}},
	}})
	r := conn.Execute(context.Background(), req("k", `{}`))
	mu.Lock()
	defer mu.Unlock()
	if r.Kind != connectors.Ambiguous || posts != 1 {
		t.Errorf("a 401 listed as ambiguous: %+v after %d POSTs, want ambiguous after 1", r, posts)
	}
}

// TestEmptyPathValueRefused: a URL path placeholder whose value is empty
// would name another resource — /v1/orders/{data.id} with "" is
// /v1/orders/, the listing, whose 200 the default found rule reads as "it
// happened": a wrong confirmation; and an Execute would go to another
// endpoint. The command cannot be sent as configured (rejected, nothing
// sent) and a lookup so built has no answer (unknown). An empty query
// value stays: it names the same resource.
func TestEmptyPathValueRefused(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		_, _ = w.Write([]byte(`{"data":[{"id":"someone else's"}]}`))
	}))
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/v1/orders/{data.id}", API: httpconn.API{
		Method:  http.MethodPut,
		Confirm: &httpconn.Confirm{URL: srv.URL + "/v1/orders/{data.id}"},
	}})
	r := conn.Execute(context.Background(), req("k", `{"id":""}`))
	if r.Kind != connectors.Rejected || !strings.Contains(r.Message, "{data.id} is empty") {
		t.Errorf("execute with an empty path value: %+v, want rejected", r)
	}
	r = conn.Confirm(context.Background(), req("k", `{"id":""}`))
	if r.Kind != connectors.Ambiguous {
		t.Errorf("lookup with an empty path value: %+v, want unknown", r)
	}
	mu.Lock()
	if len(paths) != 0 {
		t.Errorf("sent %q", paths)
	}
	mu.Unlock()
	q := newConn(t, httpconn.Config{URL: srv.URL + "/v1/orders?ref={data.id}"})
	if r := q.Execute(context.Background(), req("k", `{"id":""}`)); r.Kind != connectors.Succeeded {
		t.Errorf("an empty query value: %+v", r)
	}
}

// TestControlCharacterInHeaderValue: the entity (a command's subject,
// which nothing upstream checks for control characters) goes in the
// Onceflight-Entity header, where a CR, LF or other control character
// cannot be written. net/http refused the request as "not sent" with the
// system signalled down — one bad command opened the system's breaker,
// and was retried until give_up_after — while fasthttp sent the header
// with the line break turned into a space: another entity than the
// command's. The command cannot be sent as it is: rejected, nothing sent,
// on both clients.
func TestControlCharacterInHeaderValue(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Onceflight-Entity"))
		mu.Unlock()
	}))
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL})
	for _, entity := range []string{"order-1\r\nX-Injected: 1", "order\x001", "order\x7f1"} {
		r := req("k", `{}`)
		r.Entity = entity
		res := conn.Execute(context.Background(), r)
		if res.Kind != connectors.Rejected || res.Signal != connectors.SignalNone || strings.Contains(res.Message, "order") {
			t.Errorf("entity %q: %+v, want rejected, no signal, the entity not echoed", entity, res)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Errorf("sent with entities %q", got)
	}
}

// TestFormTemplateEscapesValues: a body template sent as a form
// (content_type application/x-www-form-urlencoded, as messaging APIs take
// To=...&Body=...) gets each value form-escaped, as a JSON template gets
// it JSON-escaped: data with "&" or "=" cannot add or replace a field.
func TestFormTemplateEscapesValues(t *testing.T) {
	var mu sync.Mutex
	var got map[string][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		got = r.PostForm
		mu.Unlock()
	}))
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL, API: httpconn.API{
		Body: httpconn.BodyTemplate, ContentType: "application/x-www-form-urlencoded; charset=utf-8",
		BodyTemplate: "To={data.to}&Body={data.text}&Price={data.price}",
	}})
	r := conn.Execute(context.Background(), req("k", `{"to":"+1 555","text":"50% off & To=+1666","price":1.5}`))
	if r.Kind != connectors.Succeeded {
		t.Fatalf("execute: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{"To": "+1 555", "Body": "50% off & To=+1666", "Price": "1.5"}
	for k, v := range want {
		if len(got[k]) != 1 || got[k][0] != v {
			t.Errorf("field %s: got %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("fields %q, want only %v", got, want)
	}
}

// TestOAuth2TokenFetchEndsWithTheAttempt: a token endpoint that does not
// answer holds no Execute past its attempt's end. The oauth2 package's
// TokenSource takes no context, so the fetch was bounded only by its own
// 10s client timeout: an attempt of 2s was held 10s, and stopping the
// executor did not end it. The fetch now goes with the request's context:
// cancelled, the Execute is "not sent" at once.
func TestOAuth2TokenFetchEndsWithTheAttempt(t *testing.T) {
	t.Setenv("OAUTH_SECRET", "oauth-secret-7a6b")
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release) // before Close, which waits for the handler
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/api/x", API: httpconn.API{
		OAuth2: &httpconn.OAuth2{TokenURL: srv.URL + "/token", ClientID: "c", ClientSecret: "${env:OAUTH_SECRET}"},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-asked; cancel() }()
	r := conn.Execute(ctx, req("k", `{}`))
	if r.Kind != connectors.Unavailable || !strings.Contains(r.Message, "oauth2 token") || !strings.Contains(r.Message, context.Canceled.Error()) {
		t.Errorf("token fetch cancelled: %+v, want unavailable, not sent, context canceled", r)
	}
}

// TestSecretCutAtALimitIsRedacted: an API that quotes a credential back
// (an error page listing the request's headers) may have it straddle a
// limit the connector cuts at — the 512 bytes of a message, the bytes of
// a result — and a secret cut in two no longer matches the redaction:
// its first part went into the record. Both are redacted before cutting,
// or a body cut inside a secret loses that part.
func TestSecretCutAtALimitIsRedacted(t *testing.T) {
	const key = "sk_live_0123456789abcdef"
	t.Setenv("CUT_KEY", key)
	// The key starts 17 bytes before each limit.
	status := http.StatusBadRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		pad := 512 - 17
		if status == http.StatusOK {
			pad = 100 - 17
		}
		_, _ = w.Write([]byte(strings.Repeat("x", pad) + r.Header.Get("Authorization") + " was refused"))
	}))
	defer srv.Close()
	srv.URL += "/"
	api := httpconn.API{Headers: map[string]string{"Authorization": "${env:CUT_KEY}"}}
	r := newConn(t, httpconn.Config{URL: srv.URL, API: api}).Execute(context.Background(), req("k", `{}`))
	noSecret(t, "message", r.Message, key[:12])
	status = http.StatusOK
	conn := newConn(t, httpconn.Config{URL: srv.URL, MaxResultBytes: 100, API: api})
	r = conn.Execute(context.Background(), req("k", `{}`))
	if r.Kind != connectors.Succeeded {
		t.Fatalf("execute: %+v", r)
	}
	noSecret(t, "result", string(r.Result), key[:12])
}

// TestRedirectsNotFollowed (held before the review; kept as a guard): a
// 307 to Execute would be the effect sent again, to wherever it points,
// with the credentials; a lookup's 302 would carry them there too. Neither
// is followed: the 307 is ambiguous (confirmed), the lookup's 302 unknown.
func TestRedirectsNotFollowed(t *testing.T) {
	t.Setenv("REDIRECT_KEY", "redirect-key-3c4d5e")
	var mu sync.Mutex
	reached := 0
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached++
		mu.Unlock()
	}))
	defer other.Close()
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusFound
		if r.Method == http.MethodPost {
			mu.Lock()
			posts++
			mu.Unlock()
			code = http.StatusTemporaryRedirect
		}
		http.Redirect(w, r, other.URL+r.URL.Path, code)
	}))
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/v1/refunds", API: httpconn.API{
		Headers: map[string]string{"Authorization": "Bearer ${env:REDIRECT_KEY}"},
		Confirm: &httpconn.Confirm{URL: srv.URL + "/v1/refunds/{key}"},
	}})
	if r := conn.Execute(context.Background(), req("k", `{}`)); r.Kind != connectors.Ambiguous {
		t.Errorf("execute answered 307: %+v, want ambiguous", r)
	}
	if r := conn.Confirm(context.Background(), req("k", `{}`)); r.Kind != connectors.Ambiguous {
		t.Errorf("lookup answered 302: %+v, want unknown", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 1 || reached != 0 {
		t.Errorf("%d POSTs, %d requests at the redirect's target; want 1 and 0", posts, reached)
	}
}

// TestHeaderValueControlCharacterRefusedAtLoad: a configured header value
// (a secret read from a variable or file) with a control character other
// than CR or LF — which were refused already — was taken: net/http then
// refused every request as "not sent", the system signalled down for
// good, while fasthttp sent the character. Refused at load, like a line
// break, without showing the value.
func TestHeaderValueControlCharacterRefusedAtLoad(t *testing.T) {
	t.Setenv("CTL_KEY", "key-\x1b-4f5a")
	_, err := httpconn.New(httpconn.Config{URL: "http://127.0.0.1:1/x", API: httpconn.API{
		Headers: map[string]string{"X-Api-Key": "${env:CTL_KEY}"},
	}})
	if err == nil || !strings.Contains(err.Error(), "headers.X-Api-Key") || strings.Contains(err.Error(), "4f5a") {
		t.Errorf("a header value with an ESC: %v, want refused, naming the field, not the value", err)
	}
	t.Setenv("CTL_KEY", "key\twith-tab")
	if _, err := httpconn.New(httpconn.Config{URL: "http://127.0.0.1:1/x", API: httpconn.API{
		Headers: map[string]string{"X-Api-Key": "${env:CTL_KEY}"},
	}}); err != nil {
		t.Errorf("a tab is allowed in a header value: %v", err)
	}
}

// TestHTMLLoginPageIsNotASuccess (held before the review; kept as a
// guard): a single sign-on proxy in front of an API answers a POST with
// 200 and its login page. With a rejected_when that reads the body (the
// payments profile's), the page has no answer to it: ambiguous, confirmed
// by the lookup — not succeeded.
func TestHTMLLoginPageIsNotASuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><html><body><form action="/login">Sign in</form></body></html>`))
	}))
	defer srv.Close()
	conn := newConn(t, httpconn.Config{URL: srv.URL + "/v1/refunds", API: httpconn.API{
		Body: httpconn.BodyForm, RejectedWhen: `body.status == "failed"`, Result: `{"refund_id": body.id}`,
	}})
	if r := conn.Execute(context.Background(), req("k", `{"charge":"ch_1"}`)); r.Kind != connectors.Ambiguous {
		t.Errorf("a 200 login page: %+v, want ambiguous", r)
	}
}

// TestDotSegmentValueRefused: a key or data value "." or ".." in a URL
// path was sent as %2E or %2E%2E — not a dot-segment as written, but RFC
// 3986 §6.2.2.2 makes a percent-encoded unreserved character equal to the
// character, and a normalizing proxy or server (nginx) decodes it and
// removes the segment: GET /v1/refunds/%2E is then the listing, whose 200
// the default found rule reads as "it happened". Such a value is refused
// like an empty one: Execute rejected, a lookup (the API's, or
// confirm_url) unknown, nothing sent.
func TestDotSegmentValueRefused(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.RequestURI)
		mu.Unlock()
		// A normalizing front: the decoded path, dot-segments removed.
		if p := path.Clean(r.URL.Path); p == "/v1/refunds" || p == "/v1" {
			_, _ = w.Write([]byte(`{"data":[{"id":"re_other"}]}`))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	lookup := newConn(t, httpconn.Config{URL: srv.URL + "/v1/refunds", API: httpconn.API{
		Confirm: &httpconn.Confirm{URL: srv.URL + "/v1/refunds/{key}"},
	}})
	plain := newConn(t, httpconn.Config{URL: srv.URL + "/v1/refunds", ConfirmURL: srv.URL + "/v1/refunds/{key}"})
	exec := newConn(t, httpconn.Config{URL: srv.URL + "/v1/refunds/{data.id}", API: httpconn.API{Method: http.MethodPut}})
	for _, v := range []string{".", "..", "x/../..", "./x"} {
		for name, c := range map[string]*httpconn.Connector{"lookup": lookup, "confirm_url": plain} {
			if r := c.Confirm(context.Background(), req(v, `{}`)); r.Kind != connectors.Ambiguous {
				t.Errorf("%s of key %q: %+v, want unknown", name, v, r)
			}
		}
		if r := exec.Execute(context.Background(), req("k", `{"id":"`+v+`"}`)); r.Kind != connectors.Rejected {
			t.Errorf("execute to /v1/refunds/%s: %+v, want rejected", v, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 0 {
		t.Errorf("sent %q", sent)
	}
}
