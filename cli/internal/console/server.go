// Package console is the operator console (docs/console.md): a
// projection of the journal and outcome topics of every partition into a
// local Pebble index, and server-rendered pages over it where an on-call
// engineer finds what waits for a person, reads one execution's history
// and takes the decision, signed server-side with the console's control
// key and authored by the authenticated operator.
package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/onceflight/onceflight/cli/internal/api"
	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config is what a Server needs.
type Config struct {
	// Projection is the index the pages read. Required.
	Projection *Projection
	// Auth establishes identities (tokens, trusted proxy). Nil or
	// disabled: every request acts as LocalUser, which the cli allows
	// only on a loopback address (the cli's refuseOpenConsole).
	Auth *httpauth.Authenticator
	// LocalUser is the identity without authentication: the account that
	// started the console (default "local").
	LocalUser string
	// ReadOnly hides and refuses every decision.
	ReadOnly bool
	// Decider sends decisions; nil: no control key was given, so none
	// can be taken (the pages say so).
	Decider Decider
	// Actions and Warnings describe the configured actions (inspect).
	Actions []inspect.Action
	// Redact returns the data fields of an action that are never shown.
	Redact func(action string) []string
	// SecureCookies marks the session cookie Secure: set it when the
	// console is reached over HTTPS (a TLS-terminating proxy).
	SecureCookies bool
	// SessionTTL bounds a browser login (default 12h); CSRFTTL a form
	// (default 1h).
	SessionTTL, CSRFTTL time.Duration
	Logger              *slog.Logger
	// Audits, if set, runs the audit on a schedule; the overview shows
	// its last result. Nil: the overview points to `onceflight audit`.
	Audits *Audits
}

// Server serves the console's pages.
type Server struct {
	p         *Projection
	auth      *httpauth.Authenticator
	localUser string
	readOnly  bool
	decider   Decider
	actions   []inspect.Action
	redact    func(string) []string
	secure    bool
	log       *slog.Logger
	tmpl      map[string]*template.Template
	sessions  *sessions
	csrf      *csrf
	// loginCSRF guards the login form, with its own lifetime: a login
	// page may be left open longer than a decision form.
	loginCSRF *csrf
	mux       *http.ServeMux
	audits    *Audits
}

// New returns the console's handler.
func New(c Config) (*Server, error) {
	if c.Projection == nil {
		return nil, errors.New("console: no projection")
	}
	s := &Server{p: c.Projection, auth: c.Auth, localUser: c.LocalUser, readOnly: c.ReadOnly, decider: c.Decider,
		actions: api.PublicActions(c.Actions), redact: c.Redact, secure: c.SecureCookies, log: c.Logger, audits: c.Audits}
	if s.localUser == "" {
		s.localUser = "local"
	}
	if s.redact == nil {
		s.redact = func(string) []string { return nil }
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.CSRFTTL <= 0 {
		c.CSRFTTL = time.Hour
	}
	s.sessions = &sessions{ttl: c.SessionTTL, m: map[string]session{}}
	s.csrf = newCSRF(c.CSRFTTL)
	s.loginCSRF = newCSRF(12 * time.Hour)
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("POST /logout", s.page(s.logout))
	m.HandleFunc("GET /{$}", s.page(s.overview))
	m.HandleFunc("GET /decide", s.page(s.waiting))
	m.HandleFunc("GET /search", s.page(s.search))
	m.HandleFunc("GET /actions", s.page(s.actionsPage))
	m.HandleFunc("GET /x/{entity}/{key}", s.page(s.execution))
	m.HandleFunc("GET /x/{entity}/{key}/decide/{kind}", s.page(s.decisionForm))
	m.HandleFunc("POST /x/{entity}/{key}/decide/{kind}", s.page(s.decide))
	m.HandleFunc("GET /live", s.page(s.live))
	m.HandleFunc("/", s.page(func(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
		s.fail(w, rc, http.StatusNotFound, "No such page", "There is no page at this address. Start from the overview or search.")
	}))
	s.mux = m
	return s, nil
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP sets the headers every answer carries, then serves r. The
// Content-Security-Policy allows scripts and styles from the console's own
// /static/ only, so text from a record that escaped its escaping still
// could not run.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("console: page failed", "path", r.URL.Path, "panic", fmt.Sprint(v))
			http.Error(w, "internal error: the console could not render this page; see its log", http.StatusInternalServerError)
		}
	}()
	// Without authentication every visitor acts as the local operator, so
	// the console must not answer a page of another site that a browser
	// reaches through DNS rebinding (httpauth.LoopbackHost).
	if !s.auth.Enabled() && !httpauth.LoopbackHost(r.Host) {
		s.log.Warn("console: request refused: not addressed to a loopback name", "remote", r.RemoteAddr, "path", r.URL.Path)
		http.Error(w, "refused: "+httpauth.ErrNotLoopbackHost.Error(), http.StatusForbidden)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// reqCtx is what every page knows of its request.
type reqCtx struct {
	ID      httpauth.Identity
	CSRF    string
	binding string
	r       *http.Request
}

// CanDecide reports whether decision buttons show.
func (s *Server) canDecide(rc *reqCtx) bool {
	return !s.readOnly && s.decider != nil && rc.ID.Role.Allows(httpauth.RoleOperator)
}

// page wraps a handler: authenticated or the login page with 401.
func (s *Server) page(h func(http.ResponseWriter, *http.Request, *reqCtx)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		id, binding, ok := s.identify(r)
		if !ok {
			s.log.Warn("console: request refused: not authenticated", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			if wantsHTML(r) {
				s.renderLogin(w, r, http.StatusUnauthorized, "", r.URL.RequestURI())
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="onceflight"`)
			http.Error(w, "authentication required: log in at /login, or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
			return
		}
		h(w, r, &reqCtx{ID: id, binding: binding, CSRF: s.csrf.issue(binding), r: r})
	}
}

func wantsHTML(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return a == "" || strings.Contains(a, "text/html") || strings.Contains(a, "*/*")
}

// checkForm verifies a POST's CSRF token and origin; false means it
// answered.
func (s *Server) checkForm(w http.ResponseWriter, r *http.Request, rc *reqCtx) bool {
	if foreignOrigin(r) {
		s.log.Warn("console: form refused: foreign origin", "identity", rc.ID.Name, "path", r.URL.Path)
		s.fail(w, rc, http.StatusForbidden, "Refused: the form came from another site", "This console accepts forms only from its own pages.")
		return false
	}
	err := s.csrf.check(rc.binding, r.PostFormValue("csrf"))
	switch {
	case errors.Is(err, errCSRFExpired):
		s.fail(w, rc, http.StatusForbidden, "The form has expired", "Forms are valid for a limited time, so that a page left open is not acted on later. Nothing was done. Go back, reload the page and try again.")
		return false
	case err != nil:
		s.log.Warn("console: form refused: no valid CSRF token", "identity", rc.ID.Name, "path", r.URL.Path)
		s.fail(w, rc, http.StatusForbidden, "Refused: the form is not from this console", "The form did not carry this console's CSRF token (it may come from another site, or the console restarted). Nothing was done. Reload the page and try again.")
		return false
	}
	return true
}

// foreignOrigin reports whether r, a POST, names an Origin other than
// the console's own: a form another site made the browser send.
func foreignOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return false
	}
	u, err := url.Parse(o)
	return err != nil || u.Host != r.Host
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if _, _, ok := s.identify(r); ok {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.renderLogin(w, r, http.StatusOK, "", r.URL.Query().Get("next"))
}

func (s *Server) renderLogin(w http.ResponseWriter, _ *http.Request, code int, msg, next string) {
	s.render(w, code, "login", map[string]any{"Msg": msg, "Next": safeNext(next), "CSRF": s.loginCSRF.issue("login")})
}

// safeNext keeps a post-login redirect on this console.
func safeNext(n string) string {
	u, err := url.Parse(n)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(n, "/") || strings.HasPrefix(n, "//") ||
		strings.HasPrefix(n, "/login") || strings.ContainsFunc(n, func(r rune) bool { return r < 0x21 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	return n
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	// The login form's CSRF token is bound to nobody (there is no session
	// yet), so anyone may fetch one: another site could post it with its
	// own token and log a visitor in as that token's holder (login CSRF),
	// whose name the visitor's decisions would then carry. Its origin is
	// checked as every other form's is.
	if foreignOrigin(r) {
		s.log.Warn("console: login refused: foreign origin", "remote", r.RemoteAddr)
		s.renderLogin(w, r, http.StatusForbidden, "The login form came from another site; log in from this console's own page.", "/")
		return
	}
	if err := s.loginCSRF.check("login", r.PostFormValue("csrf")); err != nil {
		s.renderLogin(w, r, http.StatusForbidden, "The login form expired or is not from this console; try again.", r.PostFormValue("next"))
		return
	}
	if !s.auth.Enabled() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	probe, _ := http.NewRequest(http.MethodGet, "/", nil)
	probe.Header.Set("Authorization", "Bearer "+strings.TrimSpace(r.PostFormValue("token")))
	id, err := s.auth.Authenticate(probe)
	if err != nil || id.Method != httpauth.MethodToken {
		s.log.Warn("console: login refused", "remote", r.RemoteAddr)
		s.renderLogin(w, r, http.StatusUnauthorized, "That token is not valid here.", r.PostFormValue("next"))
		return
	}
	id.Method = MethodSession
	sid := s.sessions.create(id)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sid, Path: "/", HttpOnly: true, Secure: s.secure || r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(s.sessions.ttl.Seconds())})
	s.log.Info("console: logged in", "identity", id.Name, "role", id.Role)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	if !s.checkForm(w, r, rc) {
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.drop(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// fail renders an error page: what went wrong in words, never a trace.
func (s *Server) fail(w http.ResponseWriter, rc *reqCtx, code int, title, msg string) {
	s.render(w, code, "error", s.data(rc, title, map[string]any{"Title": title, "Msg": msg, "Code": code}))
}

func (s *Server) data(rc *reqCtx, title string, d map[string]any) map[string]any {
	d["Page"] = title
	d["Me"] = rc.ID
	d["CSRF"] = rc.CSRF
	d["ReadOnly"] = s.readOnly
	d["Auth"] = s.auth.Enabled()
	d["Session"] = rc.ID.Method == MethodSession
	d["Version"] = s.p.Version()
	// Whether the journal's seals are checked (docs/console.md#signed-journals).
	switch s.p.Checking() {
	case "unchecked":
		d["SealsUnchecked"] = true
	case "checked":
		if n, err := s.p.UnsignedCount(maxUnsignedCount); err == nil && n > 0 {
			d["UnsignedN"] = countText(n, maxUnsignedCount)
		}
	}
	return d
}

func (s *Server) render(w http.ResponseWriter, code int, name string, d any) {
	var buf bytes.Buffer
	if err := s.tmpl[name].ExecuteTemplate(&buf, "layout", d); err != nil {
		s.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "internal error: the console could not render this page; see its log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	ws, err := s.p.WaitingSummary()
	if err != nil {
		s.internal(w, rc, err)
		return
	}
	counts, err := s.p.OutcomeCounts()
	if err != nil {
		s.internal(w, rc, err)
		return
	}
	type sc struct {
		Status schemas.Status
		N      uint64
	}
	var cs []sc
	for _, st := range []schemas.Status{schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected, schemas.StatusUnresolved, schemas.StatusHeld, schemas.StatusInProgress} {
		cs = append(cs, sc{st, counts[st]})
	}
	d := map[string]any{"Wait": ws, "Counts": cs, "Stats": s.p.Stats(), "Live": "*"}
	if s.audits != nil {
		d["AuditEvery"] = s.audits.Every()
		if r, ok := s.audits.Last(); ok {
			d["Audit"] = r
		}
	}
	s.render(w, http.StatusOK, "overview", s.data(rc, "Overview", d))
}

func (s *Server) waiting(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	q := r.URL.Query()
	f := Filter{Action: strings.TrimSpace(q.Get("action")), Entity: strings.TrimSpace(q.Get("entity"))}
	list, err := s.p.Waiting(f, 500)
	if err != nil {
		s.internal(w, rc, err)
		return
	}
	rows := make([]row, len(list))
	for i, e := range list {
		rows[i] = s.row(e)
		// Its signed state waits, but the key also has records nobody
		// trusted signed: the console takes no decision on it.
		if u, err := s.p.HasUnsigned(e.Entity, e.Key); err == nil && u {
			rows[i].Why = unsignedRowWhy + rows[i].Why
		}
	}
	s.render(w, http.StatusOK, "decide", s.data(rc, "Needs a decision", map[string]any{"Rows": rows, "F": f, "Live": "*"}))
}

// row is an execution in a list, with its waiting reason in words.
type row struct {
	Execution
	URL, Why string
}

func (s *Server) row(e Execution) row {
	return row{Execution: e, URL: execURL(e.Entity, e.Key), Why: s.why(e)}
}

// why says why e waits (or what it is), from its evidence and latest
// error: "unresolved after attempt 1: … — attempt 1 → ambiguous
// (timeout), confirm asked by executor → unavailable (HTTP 503) ×3 —
// ambiguous_no_confirm". Error messages and evidence details can quote
// data, so an action with redacted fields shows only the codes and
// answers here; its execution page shows the scrubbed texts.
func (s *Server) why(e Execution) string {
	var b strings.Builder
	switch {
	case e.Released:
		b.WriteString("released")
	case e.Status == schemas.StatusUnresolved:
		fmt.Fprintf(&b, "unresolved after attempt %d: nobody knows whether the effect happened", e.Attempts)
	case e.Status == schemas.StatusHeld:
		b.WriteString("held as a suspected duplicate: it runs only if someone approves it")
	}
	// The answers explain what waits or failed; a success needs no why.
	if story := evidenceStory(e.Evidence, len(s.redact(e.Action)) > 0); story != "" && (e.Status == schemas.StatusUnresolved || e.Status == schemas.StatusFailed) {
		if b.Len() > 0 {
			b.WriteString(" — ")
		}
		b.WriteString(story)
	}
	if e.Error != nil {
		if b.Len() > 0 {
			b.WriteString(" — ")
		}
		b.WriteString(e.Error.Code)
		if len(s.redact(e.Action)) == 0 && e.Error.Message != "" {
			b.WriteString(": " + e.Error.Message)
		}
	}
	return b.String()
}

// evidenceStory words evs as the external system's answers in order,
// a run of the same answer once with its count ("confirm asked by
// executor → unavailable (HTTP 503) ×3"); without details when they may
// quote redacted data.
func evidenceStory(evs []schemas.Evidence, hideDetails bool) string {
	var parts []string
	last, n := "", 0
	flush := func() {
		if n > 1 {
			last += fmt.Sprintf(" ×%d", n)
		}
		if n > 0 {
			parts = append(parts, last)
		}
	}
	for _, ev := range evs {
		if hideDetails {
			ev.Detail = ""
		}
		t := wire.EntryText(ev)
		if t == last {
			n++
			continue
		}
		flush()
		last, n = t, 1
	}
	flush()
	return strings.Join(parts, ", ")
}

func (s *Server) search(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	q := r.URL.Query()
	f := Filter{Key: q.Get("key"), Entity: q.Get("entity"), Command: strings.TrimSpace(q.Get("command")), Action: strings.TrimSpace(q.Get("action"))}
	d := s.data(rc, "Search", map[string]any{"F": f, "Q": q})
	var problems []string
	if st := strings.TrimSpace(q.Get("status")); st != "" {
		switch schemas.Status(st) {
		case schemas.StatusInProgress, schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusUnresolved, schemas.StatusRejected, schemas.StatusHeld:
			f.Status = schemas.Status(st)
		default:
			problems = append(problems, fmt.Sprintf("status %q is not a status (in_progress, succeeded, failed, unresolved, rejected, held)", st))
		}
	}
	for _, tf := range []struct {
		name string
		to   *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		v := strings.TrimSpace(q.Get(tf.name))
		if v == "" {
			continue
		}
		t, err := parseTime(v)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s %q is not a time: write 2026-12-01T14:05 (local to the console), 2026-12-01T14:05:00Z or 2026-12-01", tf.name, v))
			continue
		}
		*tf.to = t
	}
	if !f.From.IsZero() && !f.To.IsZero() && f.To.Before(f.From) {
		problems = append(problems, "the time range ends before it starts")
	}
	for _, v := range []string{f.Key, f.Entity, f.Command, f.Action} {
		if !utf8.ValidString(v) || len(v) > 4096 {
			problems = append(problems, "a search field is longer than 4096 bytes or not UTF-8")
			break
		}
	}
	d["Problems"] = problems
	searched := len(q) > 0
	d["Searched"] = searched
	if len(problems) > 0 {
		s.render(w, http.StatusBadRequest, "search", d)
		return
	}
	if searched {
		list, truncated, err := s.p.Search(f, 200)
		if err != nil {
			s.internal(w, rc, err)
			return
		}
		rows := make([]row, len(list))
		for i, e := range list {
			rows[i] = s.row(e)
		}
		d["Rows"], d["Truncated"] = rows, truncated
	}
	s.render(w, http.StatusOK, "search", d)
}

func parseTime(v string) (time.Time, error) {
	for _, l := range []string{time.RFC3339Nano, "2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(l, v, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("bad time")
}

func (s *Server) actionsPage(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	s.render(w, http.StatusOK, "actions", s.data(rc, "Actions", map[string]any{"Actions": s.actions}))
}

// stepView is one timeline entry as shown: the step, the record redacted,
// and its details as indented JSON (every field, so fields added to the
// record later show without a template change).
type stepView struct {
	inspect.Step
	Rec     *schemas.Record
	Details string
}

// decisionView is a decision sent from this console and what became of it.
type decisionView struct {
	Decision
	State string // "sent", "applied", "refused"
	Where string
}

func (s *Server) execution(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	ent, key := r.PathValue("entity"), r.PathValue("key")
	v, err := s.p.Get(ent, key)
	if errors.Is(err, ErrNotFound) {
		s.fail(w, rc, http.StatusNotFound, "No such execution",
			fmt.Sprintf("The console has no execution of key %q for entity %q. It may not have been sent yet, have gone to another entity (search by key), or be older than the topics' retention.", key, ent))
		return
	}
	if err != nil {
		s.internal(w, rc, err)
		return
	}
	s.logAccess(r, rc, "entity", ent, "key", key)
	paths := s.redact(v.Exec.Action)
	// Summaries compare each record with the one before; they are made
	// from the redacted records, so an error message never shows what
	// the data hides.
	var steps []stepView
	var current *schemas.Record
	for _, st := range v.Steps {
		sv := stepView{Step: st}
		if st.Record != nil {
			red := api.RedactRecord(*st.Record, s.redact(st.Record.Action))
			sv.Step.Summary = inspect.JournalStep(current, red, 0, 0, time.Time{}).Summary
			sv.Rec = &red
			b, _ := json.Marshal(red)
			sv.Details = pretty(b)
			current = &red
		}
		steps = append(steps, sv)
	}
	var decisions []decisionView
	for _, d := range v.Decisions {
		dv := decisionView{Decision: d, State: "sent"}
		for _, st := range v.Steps {
			if st.Record == nil {
				continue
			}
			if (st.Record.Resolution != nil && st.Record.Resolution.DecisionID == d.ID) || (st.Record.Release != nil && st.Record.Release.DecisionID == d.ID) {
				dv.State, dv.Where = "applied", fmt.Sprintf("journal %d/%d", st.Partition, st.Offset)
				break
			}
		}
		if dv.State == "sent" {
			if dx, err := s.p.Get(ent, d.Key); err == nil && dx.Exec.Status.Final() {
				if dx.Exec.Status == schemas.StatusSucceeded {
					dv.State, dv.Where = "applied", "accepted by the executor"
				} else {
					dv.State = "refused"
					if dx.Exec.Error != nil {
						dv.Where = dx.Exec.Error.Code + ": " + dx.Exec.Error.Message
					}
				}
			}
		}
		decisions = append(decisions, dv)
	}
	others, _, err := s.p.Search(Filter{Entity: ent}, 50)
	if err != nil {
		s.internal(w, rc, err)
		return
	}
	others = slices.DeleteFunc(others, func(e Execution) bool { return e.Key == key })
	orows := make([]row, len(others))
	for i, e := range others {
		orows[i] = s.row(e)
	}
	var data, result, evidence string
	if current != nil {
		// How the status was established (docs/events.md#evidence), from
		// the redacted record: evidence details quote the system's answers.
		data, result, evidence = pretty(current.Data), pretty(current.Result), wire.EvidenceText(current)
	}
	d := s.data(rc, "Execution "+key, map[string]any{
		"E": v.Exec, "Why": s.why(v.Exec), "Steps": steps, "Current": current, "Data": data, "Result": result, "Evidence": evidence,
		"Redacted": paths, "Decisions": decisions, "Others": orows, "URL": execURL(ent, key),
		"Live": "x",
	})
	// The notice of a decision just sent stays until the executor has
	// taken it; the decision's line below says what became of it.
	if sent := r.URL.Query().Get("sent"); sent != "" && slices.ContainsFunc(decisions, func(d decisionView) bool { return d.ID == sent && d.State == "sent" }) {
		d["JustSent"] = sent
	}
	if len(v.Unsigned) > 0 {
		uvs := make([]unsignedView, len(v.Unsigned))
		for i, u := range v.Unsigned {
			uvs[i] = unsignedView{UnsignedRecord: u}
			if u.Record != nil {
				red := api.RedactRecord(*u.Record, s.redact(u.Record.Action))
				b, _ := json.Marshal(red)
				uvs[i].Details = pretty(b)
			}
		}
		d["Unsigned"] = uvs
		d["NoState"] = !v.Exec.Journal && v.Exec.Status == ""
	} else if s.canDecide(rc) {
		d["Kinds"] = kindsFor(v.Exec)
	}
	d["NoDecider"] = s.decider == nil && !s.readOnly
	s.render(w, http.StatusOK, "execution", d)
}

// refreshHeader marks the requests console.js makes to refresh a page
// already shown, on a live update.
const refreshHeader = "X-Console-Refresh"

// logAccess records who read an execution's record, as the record API
// does for its reads (docs/console.md#who-may-use-it): INFO when a person
// opens the page, DEBUG for the live refreshes of a page already open,
// which come up to twice a second while the index changes. It names
// the key and entity, never data.
func (s *Server) logAccess(r *http.Request, rc *reqCtx, kv ...any) {
	level := slog.LevelInfo
	if r.Header.Get(refreshHeader) != "" {
		level = slog.LevelDebug
	}
	s.log.Log(r.Context(), level, "console: record access", append([]any{"identity", rc.ID.Name, "by", rc.ID.Method}, append(kv, "remote", r.RemoteAddr)...)...)
}

// pretty indents JSON for people: as written (numbers kept), and with
// <, > and & as themselves, since the template escapes them for HTML.
func pretty(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	return prettyValue(v)
}

func prettyValue(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func execURL(entity, key string) string {
	return "/x/" + url.PathEscape(entity) + "/" + url.PathEscape(key)
}

// decisionTarget loads the execution and kind of a decision request;
// false means it answered.
func (s *Server) decisionTarget(w http.ResponseWriter, r *http.Request, rc *reqCtx) (View, Kind, bool) {
	ent, key := r.PathValue("entity"), r.PathValue("key")
	if s.readOnly || s.decider == nil || !rc.ID.Role.Allows(httpauth.RoleOperator) {
		msg := "This console is read-only (--read-only): it shows executions but takes no decisions."
		switch {
		case s.readOnly:
		case s.decider == nil:
			msg = "This console has no control key (--control-key-file), so it cannot sign decisions. Use `onceflight resolve`, `approve` or `release`, or restart the console with the key."
		default:
			msg = fmt.Sprintf("%s has the role %s; decisions need the role operator (token file: NAME:TOKEN:operator).", rc.ID.Name, rc.ID.Role)
		}
		s.fail(w, rc, http.StatusForbidden, "Decisions are not available", msg)
		return View{}, Kind{}, false
	}
	k, ok := kindNamed(r.PathValue("kind"))
	if !ok {
		s.fail(w, rc, http.StatusNotFound, "No such decision", fmt.Sprintf("%q is not a decision this console offers.", r.PathValue("kind")))
		return View{}, Kind{}, false
	}
	v, err := s.p.Get(ent, key)
	if errors.Is(err, ErrNotFound) {
		s.fail(w, rc, http.StatusNotFound, "No such execution", fmt.Sprintf("The console has no execution of key %q for entity %q.", key, ent))
		return View{}, Kind{}, false
	}
	if err != nil {
		s.internal(w, rc, err)
		return View{}, Kind{}, false
	}
	if len(v.Unsigned) > 0 {
		u := v.Unsigned[len(v.Unsigned)-1]
		s.log.Warn("console: decision refused: unsigned journal records", "identity", rc.ID.Name, "entity", ent, "key", key, "partition", u.Partition, "offset", u.Offset)
		s.render(w, http.StatusConflict, "error", s.data(rc, "Not decided", map[string]any{"Title": "This execution has UNSIGNED journal records",
			"Msg": fmt.Sprintf("Nothing was sent. Key %q of entity %q has %d journal record(s) that no trusted executor signature covers (the latest at partition %d offset %d: %s). "+
				"Someone without an executor key may have written them; the console does not act on them. Check who writes the journal topic (docs/trust.md#threat-model), then decide with `onceflight resolve`, `approve` or `release` if the executor's own state needs it.",
				key, ent, len(v.Unsigned), u.Partition, u.Offset, u.Why),
			"Code": http.StatusConflict, "Link": execURL(ent, key)}))
		return View{}, Kind{}, false
	}
	return v, k, true
}

func (s *Server) decisionForm(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	v, k, ok := s.decisionTarget(w, r, rc)
	if !ok {
		return
	}
	if !k.Applies(v.Exec) {
		s.stale(w, rc, v, k)
		return
	}
	s.render(w, http.StatusOK, "confirm", s.data(rc, k.Label, map[string]any{"E": v.Exec, "K": k, "URL": execURL(v.Exec.Entity, v.Exec.Key), "Why": s.why(v.Exec)}))
}

// stale answers a decision on an execution that no longer waits for it:
// what happened instead.
func (s *Server) stale(w http.ResponseWriter, rc *reqCtx, v View, k Kind) {
	st := string(v.Exec.Status)
	if v.Exec.Released {
		st = "released"
	}
	msg := fmt.Sprintf("Nothing was sent. %q can be taken on a record that is %s; key %q of entity %q is now %s.", k.Label, joinStatuses(k.From), v.Exec.Key, v.Exec.Entity, st)
	for i := len(v.Steps) - 1; i >= 0; i-- {
		if rec := v.Steps[i].Record; rec != nil {
			if res := api.RedactRecord(*rec, s.redact(rec.Action)).Resolution; res != nil {
				msg += fmt.Sprintf(" It was resolved as %s by %s: %q.", res.As, res.By, res.Reason)
			}
			break
		}
	}
	s.render(w, http.StatusConflict, "error", s.data(rc, "Already decided", map[string]any{"Title": "This execution no longer waits for that decision", "Msg": msg, "Code": http.StatusConflict, "Link": execURL(v.Exec.Entity, v.Exec.Key)}))
}

func joinStatuses(ss []schemas.Status) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, " or ")
}

// maxReason bounds a decision's reason: it is stored in the record.
const maxReason = 2000

func (s *Server) decide(w http.ResponseWriter, r *http.Request, rc *reqCtx) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !s.checkForm(w, r, rc) {
		return
	}
	v, k, ok := s.decisionTarget(w, r, rc)
	if !ok {
		return
	}
	if !k.Applies(v.Exec) {
		s.stale(w, rc, v, k)
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	d := s.data(rc, k.Label, map[string]any{"E": v.Exec, "K": k, "URL": execURL(v.Exec.Entity, v.Exec.Key), "Why": s.why(v.Exec), "Reason": reason})
	switch {
	case reason == "":
		d["Problem"] = "Give a reason: it is recorded with the decision, for whoever reads this record next."
		s.render(w, http.StatusBadRequest, "confirm", d)
		return
	case len(reason) > maxReason || !utf8.ValidString(reason):
		d["Problem"] = fmt.Sprintf("The reason must be UTF-8 text of at most %d bytes.", maxReason)
		s.render(w, http.StatusBadRequest, "confirm", d)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		d["Review"] = true
		s.render(w, http.StatusOK, "confirm", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	dec, err := s.decider.Send(ctx, v.Exec, k, reason, rc.ID.Name)
	if err != nil {
		s.log.Error("console: decision not sent", "identity", rc.ID.Name, "decision", k.Name, "entity", v.Exec.Entity, "key", v.Exec.Key, "err", err)
		s.fail(w, rc, http.StatusBadGateway, "The decision could not be sent", "Kafka did not take the control command: "+err.Error()+". Nothing was decided; try again.")
		return
	}
	dec.At = time.Now().UTC()
	if err := s.p.SaveDecision(v.Exec.Entity, v.Exec.Key, dec); err != nil {
		s.log.Error("console: decision sent but not remembered", "err", err)
	}
	s.log.Info("console: decision sent", "identity", rc.ID.Name, "by", rc.ID.Method, "decision", k.Name, "entity", v.Exec.Entity, "key", v.Exec.Key, "decision_id", dec.ID)
	http.Redirect(w, r, execURL(v.Exec.Entity, v.Exec.Key)+"?sent="+url.QueryEscape(dec.ID), http.StatusSeeOther)
}

// live streams a Server-Sent Event whenever the index changes, at most
// twice a second; the page's script then reloads what it shows.
func (s *Server) live(w http.ResponseWriter, r *http.Request, _ *reqCtx) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	ch, stop := s.p.Subscribe()
	defer stop()
	fmt.Fprintf(w, "retry: 3000\nevent: version\ndata: %d\n\n", s.p.Version())
	fl.Flush()
	keep := time.NewTicker(20 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-ch:
			fmt.Fprintf(w, "event: version\ndata: %d\n\n", s.p.Version())
			select {
			case <-r.Context().Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
		fl.Flush()
	}
}

func (s *Server) internal(w http.ResponseWriter, rc *reqCtx, err error) {
	s.log.Error("console: page failed", "err", err)
	s.fail(w, rc, http.StatusInternalServerError, "The console could not read its index", "See the console's log for the cause. The executors are not affected.")
}

const unsignedRowWhy = "UNSIGNED journal records on this key: the console takes no decision on it (see its page) — "

// maxUnsignedCount bounds the count of unsigned records every page shows.
const maxUnsignedCount = 1000

func countText(n, limit int) string {
	if n >= limit {
		return fmt.Sprintf("%d or more", limit)
	}
	return fmt.Sprint(n)
}

// unsignedView is an UNSIGNED record on the execution page.
type unsignedView struct {
	UnsignedRecord
	Details string
}
