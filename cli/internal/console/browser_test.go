package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/onceflight/onceflight/schemas"
)

// chromium finds a Chromium or Chrome binary: $CHROMIUM, then the usual
// names (Debian's package is chromium).
func chromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// needChromium returns chromium() or skips the test, saying how to get it.
func needChromium(t *testing.T) string {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("Chromium is not installed, so the browser tests cannot run: apt-get install chromium (.ci/run does), or set CHROMIUM to a Chrome binary")
	}
	if _, err := exec.LookPath(path); err != nil {
		t.Skipf("Chromium at %s cannot be run (%v), so the browser tests cannot run: apt-get install chromium (.ci/run does), or set CHROMIUM to a Chrome binary", path, err)
	}
	return path
}

// newBrowser starts headless Chromium for the test and returns a tab's
// context.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := needChromium(t)
	// Not t.TempDir: Chromium's helper processes may still write to the
	// profile for a moment after the browser was stopped, and TempDir's
	// cleanup then fails the test ("directory not empty").
	profile, err := os.MkdirTemp("", "onceflight-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA(); removeProfile(t, profile) })
	if err := chromedp.Run(ctx); err != nil {
		t.Skipf("Chromium at %s does not start (%v): the browser tests cannot run here", path, err)
	}
	return ctx
}

// removeProfile removes a stopped browser's profile, trying again for a
// few seconds while its last helper processes finish writing to it.
func removeProfile(t *testing.T, dir string) {
	var err error
	for range 50 {
		if err = os.RemoveAll(dir); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("browser profile %s left behind: %v", dir, err)
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var loc, body string
		_ = chromedp.Run(ctx, chromedp.Location(&loc), chromedp.Text("body", &body, chromedp.ByQuery))
		t.Fatalf("%s: %v\nat %s:\n%s", what, err, loc, body)
	}
}

// waitText waits until the text of sel is want (the page updates itself
// over Server-Sent Events, so no reload is done here).
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := chromedp.Run(tctx, chromedp.TextContent(sel, &got, chromedp.ByQuery))
		cancel()
		if err == nil && strings.TrimSpace(got) == want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s shows %q, want %q (within 30s, without reloading)", sel, got, want)
}

// screenshot saves the page as docs/img/NAME.png when
// ONCEFLIGHT_SCREENSHOTS=1 (the README's pictures), else in a temporary
// directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(&png, 100))
	dir := t.TempDir()
	if os.Getenv("ONCEFLIGHT_SCREENSHOTS") == "1" {
		dir = filepath.Join("..", "..", "..", "docs", "img")
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleBrowser drives the real pages in headless Chromium against a
// real executor on kfake: log in, find the held execution, approve it and
// watch it run; resolve an unresolved one; a forged cross-origin form is
// refused; keys, entities and data with markup render as text and run
// nothing; a read-only console shows no decision.
func TestConsoleBrowser(t *testing.T) {
	needChromium(t) // where it is missing, skip before starting an executor
	e := newEnv(t)
	ctx := newBrowser(t) // closed first at the end: its live-update streams would hold the servers open

	e.h.SubmitAction("c-a", "dup.refund", "customer-77", "refund-a", `{"order_id":"o-77","amount":30,"iban":"DE44500105175407324931"}`)
	waitExec(t, e.p, "customer-77", "refund-a", schemas.StatusSucceeded)
	e.h.SubmitAction("c-b", "dup.refund", "customer-77", "refund-b", `{"order_id":"o-77","amount":30,"iban":"DE44500105175407324931"}`)
	e.h.SubmitAction("c-m9", "messages.send", "customer-9", "msg-9", `{"text":"your refund is on its way"}`)
	e.h.SubmitAction("c-m10", "messages.send", "customer-10", "msg-10", `{"text":"second message"}`)
	const (
		xssKey    = `<script>window.__pwned=2</script>"'ü–✓`
		xssEntity = `<img src=x onerror="window.__pwned=1">é"'`
	)
	e.h.Submit("c-x", xssEntity, xssKey, `{"note":"<script>window.__pwned=3</script>","q":"\"'<b>bold</b>","name":"Zoë Åström"}`)
	waitExec(t, e.p, "customer-77", "refund-b", schemas.StatusHeld)
	waitExec(t, e.p, "customer-9", "msg-9", schemas.StatusUnresolved)
	waitExec(t, e.p, "customer-10", "msg-10", schemas.StatusUnresolved)
	waitExec(t, e.p, xssEntity, xssKey, schemas.StatusSucceeded)

	// Unauthenticated: the login page, nothing else.
	var body string
	run(t, ctx, "open the console",
		chromedp.Navigate(e.url+"/decide"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.Text("body", &body, chromedp.ByQuery))
	if strings.Contains(body, "refund-b") {
		t.Fatalf("the login page shows records:\n%s", body)
	}
	run(t, ctx, "log in",
		chromedp.SendKeys("#token", e.operator, chromedp.ByID),
		chromedp.Submit("#token", chromedp.ByID),
		chromedp.WaitVisible("#waiting", chromedp.ByID))

	// Find the held execution, approve it, see it run.
	run(t, ctx, "open the held execution",
		chromedp.Click(`//table[@id="waiting"]//a[text()="refund-b"]`, chromedp.BySearch),
		chromedp.WaitVisible("#exec-key", chromedp.ByID),
		chromedp.Click(`a[href$="/decide/approve"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#reason", chromedp.ByID),
		chromedp.SendKeys("#reason", "customer returned two items; both refunds are due", chromedp.ByID),
		chromedp.Click("#review", chromedp.ByID),
		chromedp.WaitVisible("#confirm", chromedp.ByID),
		chromedp.Click("#confirm", chromedp.ByID),
		chromedp.WaitVisible(".decisions", chromedp.ByQuery))
	waitText(t, ctx, "#exec-status", "succeeded")
	waitText(t, ctx, ".decisions .dstate", "applied")
	run(t, ctx, "read the timeline", chromedp.Text("#timeline", &body, chromedp.ByID))
	if !strings.Contains(body, "by alice") || !strings.Contains(body, "customer returned two items") || strings.Contains(body, "DE44500105175407324931") {
		t.Errorf("timeline after the approval lacks the decision by alice, or shows the redacted iban:\n%s", body)
	}
	if n := e.h.EffectsOf("customer-77", "refund-b"); n != 1 {
		t.Errorf("the approved duplicate took effect %d times, want 1", n)
	}
	screenshot(t, ctx, "console-execution")

	// Find the unresolved one, resolve it with a reason.
	run(t, ctx, "resolve msg-9",
		chromedp.Navigate(e.url+"/decide"),
		chromedp.Click(`//table[@id="waiting"]//a[text()="msg-9"]`, chromedp.BySearch),
		chromedp.WaitVisible("#exec-key", chromedp.ByID),
		chromedp.Click(`a[href$="/decide/resolve-succeeded"]`, chromedp.ByQuery),
		chromedp.SendKeys("#reason", "the mail relay's log shows it was delivered", chromedp.ByID),
		chromedp.Click("#review", chromedp.ByID),
		chromedp.Click("#confirm", chromedp.ByID),
		chromedp.WaitVisible(".decisions", chromedp.ByQuery))
	waitText(t, ctx, "#exec-status", "succeeded")
	waitText(t, ctx, ".decisions .dstate", "applied")

	run(t, ctx, "overview", chromedp.Navigate(e.url+"/"), chromedp.WaitVisible("#n-unresolved", chromedp.ByID))
	waitText(t, ctx, "#n-unresolved", "1")
	screenshot(t, ctx, "console-overview")

	// A form on another origin posting to the console, with the logged-in
	// browser's cookie but without the CSRF token, is refused.
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form method="post" action="%s/x/customer-10/msg-10/decide/resolve-failed"><input name="reason" value="forged"><input name="confirm" value="yes"><button id="go">win a prize</button></form>`, e.url)
	}))
	defer forger.Close()
	run(t, ctx, "forged form",
		chromedp.Navigate(forger.URL),
		chromedp.Click("#go", chromedp.ByID),
		chromedp.WaitVisible("h1", chromedp.ByQuery),
		chromedp.Text("body", &body, chromedp.ByQuery))
	if !strings.Contains(body, "Refused") {
		t.Errorf("the forged form was not refused:\n%s", body)
	}
	if v, _ := e.p.Get("customer-10", "msg-10"); v.Exec.Status != schemas.StatusUnresolved || len(v.Decisions) != 0 {
		t.Errorf("after the forged form msg-10 is %s with decisions %+v", v.Exec.Status, v.Decisions)
	}

	// Markup in keys, entities and data is text, and runs nothing.
	for _, page := range []string{execURL(xssEntity, xssKey), "/search?key=" + urlQuery(xssKey), "/search?entity=" + urlQuery(xssEntity)} {
		var pwned bool
		var imgs int
		run(t, ctx, "open "+page,
			chromedp.Navigate(e.url+page),
			chromedp.WaitVisible("main", chromedp.ByQuery),
			chromedp.Sleep(300*time.Millisecond),
			chromedp.Evaluate(`window.__pwned !== undefined`, &pwned),
			chromedp.Evaluate(`document.querySelectorAll("main img, main script, main b").length`, &imgs))
		if pwned || imgs != 0 {
			t.Errorf("%s: script from data ran (%v) or markup became elements (%d)", page, pwned, imgs)
		}
	}
	var key, data string
	run(t, ctx, "read the key", chromedp.Navigate(e.url+execURL(xssEntity, xssKey)),
		chromedp.TextContent("#exec-key", &key, chromedp.ByID), chromedp.TextContent("#data", &data, chromedp.ByID))
	if key != xssKey || !strings.Contains(data, "<script>window.__pwned=3</script>") || !strings.Contains(data, "Zoë Åström") {
		t.Errorf("key shows as %q (want %q), data as %q", key, xssKey, data)
	}

	// Keyboard: "/" goes to the search field. Times: local, UTC on hover.
	var focused, title string
	run(t, ctx, "keyboard and times",
		chromedp.Navigate(e.url+"/search"),
		chromedp.WaitVisible("#q-key", chromedp.ByID),
		chromedp.Evaluate(`document.activeElement && document.activeElement.blur()`, nil),
		chromedp.KeyEvent("/"),
		chromedp.Evaluate(`document.activeElement.id`, &focused),
		chromedp.Navigate(e.url+"/x/customer-9/msg-9"),
		chromedp.WaitVisible("#timeline", chromedp.ByID),
		chromedp.AttributeValue("#timeline time", "title", &title, nil, chromedp.ByQuery))
	if focused != "q-key" {
		t.Errorf(`"/" focused %q, want the search's key field`, focused)
	}
	if !strings.HasSuffix(title, " UTC") {
		t.Errorf("a time's hover text is %q, want the UTC time", title)
	}

	// A phone: the execution page fits the screen's width.
	var overflow bool
	run(t, ctx, "phone",
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(e.url+"/x/customer-77/refund-b"),
		chromedp.WaitVisible("#timeline", chromedp.ByID),
		chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow))
	if overflow {
		t.Errorf("the execution page is wider than a 390px phone screen")
	}
	screenshot(t, ctx, "console-phone")
	run(t, ctx, "desktop", chromedp.EmulateViewport(1280, 900))

	// A read-only console (it shares the browser's cookie jar for
	// 127.0.0.1, so this comes last) offers no decision anywhere.
	run(t, ctx, "read-only login",
		chromedp.Navigate(e.roURL+"/login"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", e.operator, chromedp.ByID),
		chromedp.Submit("#token", chromedp.ByID),
		chromedp.WaitVisible("#n-unresolved", chromedp.ByID))
	for _, page := range []string{"/x/customer-10/msg-10", "/x/customer-77/refund-a", "/decide"} {
		var n int
		run(t, ctx, "read-only "+page, chromedp.Navigate(e.roURL+page), chromedp.WaitVisible("main", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelectorAll('a[href*="/decide/"], #decisions, form[action*="/decide/"]').length`, &n))
		if n != 0 {
			t.Errorf("read-only %s shows %d decision controls", page, n)
		}
	}
}

func urlQuery(s string) string { return url.QueryEscape(s) }
