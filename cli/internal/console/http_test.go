package console

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// browser is a browser-like HTTP client logged in to a console.
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs in to base with tok, as the login form does.
func login(t *testing.T, base, tok string) *browser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	s := &browser{t: t, c: &http.Client{Jar: jar}, base: base}
	_, body := s.do(http.MethodGet, "/login", nil)
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("login page has no CSRF token:\n%s", body)
	}
	code, body := s.do(http.MethodPost, "/login", url.Values{"csrf": {m[1]}, "token": {tok}, "next": {"/"}})
	if code != http.StatusOK || !strings.Contains(body, "Overview") {
		t.Fatalf("login: %d\n%s", code, body)
	}
	return s
}

func (s *browser) do(method, path string, form url.Values) (int, string) {
	s.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, s.base+path, body)
	req.Header.Set("Accept", "text/html")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := s.c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// csrf returns the CSRF token of the page at path.
func (s *browser) csrf(path string) string {
	s.t.Helper()
	_, body := s.do(http.MethodGet, path, nil)
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		s.t.Fatalf("%s has no CSRF token", path)
	}
	return m[1]
}

// TestConsoleHTTPAccessAndBadInput checks, without a browser, what the
// console answers to strangers, forged and stale forms and bad input.
func TestConsoleHTTPAccessAndBadInput(t *testing.T) {
	e := newEnv(t)
	e.h.SubmitAction("c-msg", "messages.send", "customer-9", "msg-9", `{"text":"hi"}`)
	e.h.SubmitAction("c-r1", "dup.refund", "customer-7", "refund-a", `{"order_id":"o-1","iban":"DE44500105175407324931"}`)
	waitExec(t, e.p, "customer-9", "msg-9", schemas.StatusUnresolved)
	waitExec(t, e.p, "customer-7", "refund-a", schemas.StatusSucceeded)
	xurl := "/x/customer-9/msg-9"

	// Strangers get the login page with 401 (browsers) or a bare 401.
	code, body := get(t, e.url+xurl, "")
	if code != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) || strings.Contains(body, "Timeline") || strings.Contains(body, "messages.send") {
		t.Errorf("unauthenticated GET of an execution: %d, want 401 with the login form and nothing of the record:\n%s", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url+xurl, nil)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("unauthenticated API-style GET: %d %v, want 401 with WWW-Authenticate", resp.StatusCode, resp.Header)
	}
	if code, _ := get(t, e.url+xurl, "wrong-token-0123456789"); code != http.StatusUnauthorized {
		t.Errorf("wrong bearer token: %d, want 401", code)
	}
	// A bearer token works without a login, and every page has the CSP.
	code, body = get(t, e.url+xurl, e.reader)
	if code != http.StatusOK || !strings.Contains(body, "msg-9") {
		t.Fatalf("bearer GET: %d\n%s", code, body)
	}
	// The page says how the status was established (docs/events.md#evidence).
	if !strings.Contains(body, `<strong>How:</strong> attempt 1 → ambiguous (`) || !strings.Contains(body, "→ unresolved, established by answer</p>") {
		t.Errorf("the execution page does not tell how msg-9 became unresolved:\n%s", body)
	}
	resp, err = http.Get(e.url + "/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}

	op := login(t, e.url, e.operator)
	// Needs a decision lists it, filtered by action and entity, with why.
	for q, want := range map[string]bool{"": true, "?action=messages.send": true, "?entity=customer-9": true, "?action=dup.refund": false, "?entity=customer-7": false} {
		_, body := op.do(http.MethodGet, "/decide"+q, nil)
		if got := strings.Contains(body, `href="/x/customer-9/msg-9"`); got != want {
			t.Errorf("/decide%s lists msg-9: %v, want %v", q, got, want)
		}
		if want && (!strings.Contains(body, "ambiguous_no_confirm") || !strings.Contains(body, "attempt 1 → ambiguous")) {
			t.Errorf("/decide%s does not say why msg-9 waits (its error code and what the service answered)", q)
		}
	}
	// Redacted fields never show, nor their text elsewhere.
	_, body = op.do(http.MethodGet, "/x/customer-7/refund-a", nil)
	if strings.Contains(body, "DE44500105175407324931") || !strings.Contains(body, "[redacted]") {
		t.Errorf("the redacted iban shows on the execution page (or no [redacted] marker)")
	}

	// A forged form (no token, a made-up token) is refused and sends
	// nothing.
	for _, tok := range []string{"", "AAAAAAAAAAAforged", strings.Repeat("A", 54)} {
		code, body := op.do(http.MethodPost, xurl+"/decide/resolve-succeeded", url.Values{"csrf": {tok}, "reason": {"forged"}, "confirm": {"yes"}})
		if code != http.StatusForbidden || !strings.Contains(body, "not from this console") {
			t.Errorf("forged form (csrf %q): %d, want 403\n%s", tok, code, body)
		}
	}
	// A token issued to another session is refused too.
	other := login(t, e.url, e.operator)
	code, _ = op.do(http.MethodPost, xurl+"/decide/resolve-succeeded", url.Values{"csrf": {other.csrf(xurl)}, "reason": {"x"}, "confirm": {"yes"}})
	if code != http.StatusForbidden {
		t.Errorf("another session's CSRF token: %d, want 403", code)
	}
	// An expired form says so.
	exp := login(t, e.expURL, e.operator)
	code, body = exp.do(http.MethodPost, xurl+"/decide/resolve-succeeded", url.Values{"csrf": {exp.csrf(xurl)}, "reason": {"late"}, "confirm": {"yes"}})
	if code != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Errorf("expired form: %d, want 403 saying it expired\n%s", code, body)
	}
	if v, _ := e.p.Get("customer-9", "msg-9"); len(v.Decisions) != 0 {
		t.Fatalf("a refused form sent a decision: %+v", v.Decisions)
	}

	// A reader may look but not decide.
	rd := login(t, e.url, e.reader)
	_, body = rd.do(http.MethodGet, xurl, nil)
	if strings.Contains(body, "/decide/") {
		t.Errorf("a reader's execution page offers decisions")
	}
	code, _ = rd.do(http.MethodPost, xurl+"/decide/resolve-succeeded", url.Values{"csrf": {rd.csrf(xurl)}, "reason": {"r"}, "confirm": {"yes"}})
	if code != http.StatusForbidden {
		t.Errorf("a reader's decision: %d, want 403", code)
	}

	// A reason is required; then a review step; then it is sent.
	code, body = op.do(http.MethodPost, xurl+"/decide/resolve-succeeded", url.Values{"csrf": {op.csrf(xurl)}, "reason": {"  "}})
	if code != http.StatusBadRequest || !strings.Contains(body, "Give a reason") {
		t.Errorf("empty reason: %d\n%s", code, body)
	}
	code, body = op.do(http.MethodPost, xurl+"/decide/resolve-succeeded", url.Values{"csrf": {op.csrf(xurl)}, "reason": {"mail log shows it was sent"}})
	if code != http.StatusOK || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Fatalf("review step: %d\n%s", code, body)
	}
	code, _ = op.do(http.MethodPost, xurl+"/decide/resolve-succeeded", url.Values{"csrf": {op.csrf(xurl)}, "reason": {"mail log shows it was sent"}, "confirm": {"yes"}})
	if code != http.StatusOK {
		t.Fatalf("confirm: %d", code)
	}
	v := waitExec(t, e.p, "customer-9", "msg-9", schemas.StatusSucceeded)
	last := v.Steps[len(v.Steps)-1]
	for _, st := range v.Steps {
		if st.Record != nil {
			last = st
		}
	}
	if res := last.Record.Resolution; res == nil || res.By != "alice" || res.Reason != "mail log shows it was sent" || res.DecisionID == "" {
		t.Errorf("resolution = %+v, want by alice (the login) with the reason", last.Record.Resolution)
	}
	// Deciding again on what is no longer unresolved says what happened.
	code, body = op.do(http.MethodPost, xurl+"/decide/resolve-failed", url.Values{"csrf": {op.csrf(xurl)}, "reason": {"again"}, "confirm": {"yes"}})
	if code != http.StatusConflict || !strings.Contains(body, "now succeeded") || !strings.Contains(body, "alice") {
		t.Errorf("stale decision: %d, want 409 saying it is now succeeded, resolved by alice\n%s", code, body)
	}

	// Bad input: clear pages, never a trace.
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/x/customer-9/no-such-key", http.StatusNotFound, "No such execution"},
		{"/search?status=done", http.StatusBadRequest, "is not a status"},
		{"/search?from=yesterday", http.StatusBadRequest, "is not a time"},
		{"/search?from=2026-12-02&to=2026-12-01", http.StatusBadRequest, "ends before it starts"},
		{"/x/customer-9/msg-9/decide/explode", http.StatusNotFound, "not a decision"},
		{"/nowhere", http.StatusNotFound, "No such page"},
	} {
		code, body := op.do(http.MethodGet, c.path, nil)
		if code != c.code || !strings.Contains(body, c.want) || strings.Contains(body, "goroutine") {
			t.Errorf("GET %s: %d, want %d with %q\n%s", c.path, code, c.code, c.want, body)
		}
	}
	// Search finds by key, entity, command id, action and status.
	for _, q := range []string{"key=msg-9", "entity=customer-9", "command=c-msg", "action=messages.send", "status=succeeded&action=messages.send"} {
		if _, body := op.do(http.MethodGet, "/search?"+q, nil); !strings.Contains(body, `href="/x/customer-9/msg-9"`) {
			t.Errorf("search %s does not find msg-9", q)
		}
	}
	// The Actions page describes what protects each action, as
	// `onceflight actions` does.
	code, body = op.do(http.MethodGet, "/actions", nil)
	for _, w := range []string{"dup.refund", "messages.send", "Unique by", "order_id", "HTTP 5xx",
		`give up on "not done" after 1h0m0s`, "messages.send (its own): at most --max-inflight requests in flight (adapted to its answers)"} {
		if code != http.StatusOK || !strings.Contains(body, w) {
			t.Errorf("/actions (%d) lacks %q", code, w)
		}
	}
	// The read-only console offers nothing and refuses decisions.
	ro := login(t, e.roURL, e.operator)
	_, body = ro.do(http.MethodGet, "/x/customer-7/refund-a", nil)
	if strings.Contains(body, "/decide/") {
		t.Errorf("the read-only console offers decisions")
	}
	code, _ = ro.do(http.MethodPost, "/x/customer-7/refund-a/decide/release", url.Values{"csrf": {ro.csrf("/")}, "reason": {"r"}, "confirm": {"yes"}})
	if code != http.StatusForbidden {
		t.Errorf("read-only console decision: %d, want 403", code)
	}
}

// TestEvidenceStory: why an execution waits, in the external system's
// answers, a run of the same answer counted once; without the details
// (which may quote data) for an action with redacted fields.
func TestEvidenceStory(t *testing.T) {
	evs := []schemas.Evidence{
		{Kind: schemas.EvidenceAttempt, Attempt: 1, Answer: schemas.AnswerAmbiguous, Detail: "timeout after 2s"},
		{Kind: schemas.EvidenceConfirm, By: "executor", Answer: schemas.AnswerUnavailable, Detail: "HTTP 503"},
		{Kind: schemas.EvidenceConfirm, By: "executor", Answer: schemas.AnswerUnavailable, Detail: "HTTP 503"},
		{Kind: schemas.EvidenceConfirm, By: "executor", Answer: schemas.AnswerUnavailable, Detail: "HTTP 503"},
		{Kind: schemas.EvidenceConfirm, By: "reconciler", Answer: schemas.AnswerUnavailable, Detail: "connection refused"},
	}
	if got, want := evidenceStory(evs, false), "attempt 1 → ambiguous (timeout after 2s), confirm asked by executor → unavailable (HTTP 503) ×3, confirm asked by reconciler → unavailable (connection refused)"; got != want {
		t.Errorf("story:\n got %s\nwant %s", got, want)
	}
	if got, want := evidenceStory(evs, true), "attempt 1 → ambiguous, confirm asked by executor → unavailable ×3, confirm asked by reconciler → unavailable"; got != want {
		t.Errorf("story without details:\n got %s\nwant %s", got, want)
	}
	if got := evidenceStory(nil, false); got != "" {
		t.Errorf("no evidence: %q", got)
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/x/e/k?sent=1":      "/x/e/k?sent=1",
		"/search?key=a%20b":  "/search?key=a%20b",
		"//evil.example/":    "/",
		"/\t/evil.example/":  "/",
		"/\\evil.example/":   "/",
		"https://evil.test/": "/",
		"evil":               "/",
		"/login?next=/":      "/",
		"":                   "/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConsoleWithoutAuthenticationAnswersOnlyLoopbackNames: a console
// without authentication (on loopback, every visitor the local operator)
// refuses requests whose Host is not a loopback name, so a page of
// another site rebound to 127.0.0.1 (DNS rebinding) reads nothing.
func TestConsoleWithoutAuthenticationAnswersOnlyLoopbackNames(t *testing.T) {
	e := newEnv(t)
	e.h.SubmitAction("c-msg", "messages.send", "customer-9", "msg-9", `{"text":"hi"}`)
	waitExec(t, e.p, "customer-9", "msg-9", schemas.StatusUnresolved)
	s, err := New(Config{Projection: e.p, LocalUser: "me"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	// A console that answered /live would stream: the timeout fails it.
	cl := &http.Client{Timeout: 10 * time.Second}
	for host, want := range map[string]int{"": http.StatusOK, "localhost": http.StatusOK, "rebind.attacker.test": http.StatusForbidden, "rebind.attacker.test:80": http.StatusForbidden} {
		for _, path := range []string{"/x/customer-9/msg-9", "/decide", "/live"} {
			req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
			if host != "" {
				req.Host = host
			}
			if path == "/live" {
				if want == http.StatusOK {
					continue // a stream: its 200 is tested by the browser
				}
			}
			resp, err := cl.Do(req)
			if err != nil {
				t.Errorf("GET %s with Host %q: %v, want %d", path, host, err, want)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want || (want != http.StatusOK && strings.Contains(string(b), "msg-9")) {
				t.Errorf("GET %s with Host %q: %d, want %d\n%s", path, host, resp.StatusCode, want, b)
			}
		}
	}
}
