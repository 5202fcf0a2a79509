package console

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/internal/httpauth"
)

// TestLoginRefusesAForeignOrigin: a page of another site must not log a
// browser in to the console (login CSRF), or the decisions its user takes
// next would be recorded as the author of the token that page posted. The
// login form is checked for its origin as every other form is.
func TestLoginRefusesAForeignOrigin(t *testing.T) {
	a, err := httpauth.New(httpauth.WithTokens(httpauth.Token{Name: "mallory", Role: httpauth.RoleOperator, Value: operatorToken}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Projection: &Projection{}, Auth: a, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Get(hs.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfRe.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("login page has no CSRF token:\n%s", b)
	}
	post := func(origin string) *http.Response {
		t.Helper()
		form := url.Values{"csrf": {m[1]}, "token": {operatorToken}, "next": {"/"}}
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post("https://attacker.example"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("login posted from another origin: %d, cookies %v; want 403 and no session", resp.StatusCode, resp.Cookies())
	}
	// The console's own origin, and a form without Origin, still log in.
	for _, origin := range []string{hs.URL, ""} {
		if resp := post(origin); resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || !resp.Cookies()[0].HttpOnly || resp.Cookies()[0].SameSite != http.SameSiteStrictMode {
			t.Errorf("login with Origin %q: %d, cookies %v; want 303 and one HttpOnly SameSite=Strict session cookie", origin, resp.StatusCode, resp.Cookies())
		}
	}
}
