package httpconn

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/onceflight/onceflight/connectors"
)

// API says how the connector calls a real API rather than Onceflight's own
// protocol (docs/connectors.md#calling-a-real-api): credentials, the shape
// of the request, and how the API's own lookup confirms an attempt. The
// zero API is that protocol exactly: POST of the data as JSON, confirmation
// by GET confirm_url where 200 is found and 404 not found.
//
// Every string that may carry a secret (header values, basic auth, OAuth2
// client credentials, the signing secret) may hold ${env:NAME} and
// ${file:PATH} references, resolved by New.
type API struct {
	// Method of the Execute request. Default POST.
	Method string
	// Body is how the command data is sent: BodyJSON (default), BodyForm
	// (application/x-www-form-urlencoded, nested fields in brackets) or
	// BodyTemplate (BodyTemplate expanded, sent as ContentType).
	Body         string
	BodyTemplate string
	// ContentType of a template body. Default application/json, in which
	// case string values are JSON-escaped where they are inserted.
	ContentType string
	// IdempotencyHeader carries the idempotency key on every request.
	// Default Idempotency-Key.
	IdempotencyHeader string
	// Headers are sent on Execute and Confirm requests.
	Headers   map[string]string
	BasicAuth *BasicAuth
	OAuth2    *OAuth2
	TLS       TLS
	// Signing signs Execute requests per Standard Webhooks.
	Signing *Signing
	// RejectedWhen is a CEL predicate over a 2xx answer to Execute that
	// turns it into rejected (an API answering 200 {"status":"failed"}).
	RejectedWhen string
	// Result is a CEL expression over a 2xx answer to Execute whose value
	// is recorded as the result. Default {"http_status":N,"body":...}.
	Result string
	// Confirm is the API's own lookup; nil: confirm_url, if any.
	Confirm *Confirm
	// Statuses reclassifies answers to Execute whose status does not mean
	// here what the protocol's table says (docs/connectors.md#execute-responses).
	Statuses Statuses
}

// Statuses are the status codes an API answers with a meaning of its own.
// Only two moves are offered, and neither can make the executor send an
// effect twice: a code said ambiguous is confirmed rather than retried or
// failed; a code said not done is sent again with the same key, which only
// an API that deduplicates by the key may be told to take (the actions
// file's loader refuses NotDone without idempotent_by_key). No move can
// turn an answer into a success or a failure: that would be a verdict on
// the effect no status code alone can give.
type Statuses struct {
	// Ambiguous codes may come after the request took effect: a proxy's
	// 503 after its upstream connection reset, a gateway's 4xx for a
	// request it timed out after forwarding.
	Ambiguous []int
	// NotDone codes say "not yet, ask again": Stripe's 409 while a request
	// with the same key is still running.
	NotDone []int
}

// IsZero reports whether no code is reclassified.
func (s Statuses) IsZero() bool { return len(s.Ambiguous) == 0 && len(s.NotDone) == 0 }

// ClassifyStatus is what Execute makes of an HTTP status on an API with
// these statuses: the protocol's class (the package's ClassifyStatus)
// unless the code is listed. Exported so that `onceflight actions`
// describes what Execute does.
func (s Statuses) ClassifyStatus(code int) connectors.Kind {
	switch {
	case slices.Contains(s.Ambiguous, code):
		return connectors.Ambiguous
	case slices.Contains(s.NotDone, code):
		return connectors.Unavailable
	}
	return ClassifyStatus(code)
}

// StatusList is one list of Statuses and the field that names it in the
// actions file.
type StatusList struct {
	Field string
	Codes []int
}

// Lists are s's lists, ambiguous first, as the actions file names them.
func (s Statuses) Lists() []StatusList {
	return []StatusList{{"statuses.ambiguous", s.Ambiguous}, {"statuses.not_done", s.NotDone}}
}

// InFlight reports whether an answer with code says an earlier request
// with the key may still be taking effect (connectors.Result.InFlight):
// the API's own "not done" codes, which the loader allows only on an
// idempotent_by_key action.
func (s Statuses) InFlight(code int) bool { return slices.Contains(s.NotDone, code) }

// check reports the codes that cannot be reclassified, every one of a
// list in one error.
func (s Statuses) check(fail func(string, error)) {
	seen := map[int]string{}
	for _, l := range s.Lists() {
		var bad []string
		for _, c := range l.Codes {
			switch {
			case c < 100 || c > 599:
				bad = append(bad, fmt.Sprintf("%d is not an HTTP status code", c))
			case c < 300:
				bad = append(bad, fmt.Sprintf("%d cannot be reclassified: a 1xx is not an answer, and a 2xx says the effect happened", c))
			case seen[c] != "" && seen[c] != l.Field:
				bad = append(bad, fmt.Sprintf("%d is also in %s", c, seen[c]))
			}
			seen[c] = l.Field
		}
		if len(bad) > 0 {
			fail(l.Field, errors.New(strings.Join(bad, "; ")))
		}
	}
}

// The values of API.Body.
const (
	BodyJSON     = "json"
	BodyForm     = "form"
	BodyTemplate = "template"
)

// DefaultIdempotencyHeader is API.IdempotencyHeader's default.
const DefaultIdempotencyHeader = "Idempotency-Key"

// BasicAuth is HTTP basic authentication (RFC 7617).
type BasicAuth struct{ Username, Password string }

// OAuth2 is the OAuth 2.0 client credentials grant (RFC 6749 §4.4): a
// token is fetched from TokenURL, cached until it expires, and sent as
// "Authorization: Bearer".
type OAuth2 struct {
	TokenURL     string
	ClientID     string
	ClientSecret string
	Scopes       []string
}

// Signing is a Standard Webhooks signature (standardwebhooks.com):
// webhook-id (the idempotency key, the same on every attempt),
// webhook-timestamp (Unix seconds) and webhook-signature "v1,<base64
// HMAC-SHA256 of id.timestamp.body>", keyed by Secret ("whsec_" + base64).
type Signing struct{ Secret string }

// Confirm is a lookup by the API's own means: a request (URL template over
// the command, method, extra headers) and CEL predicates over its answer.
// Found and not found must not both hold; when neither does, or one cannot
// be evaluated, the answer is unknown and asked again until
// confirm_timeout.
type Confirm struct {
	Method   string // default GET
	URL      string
	Headers  map[string]string
	Found    string // default DefaultFound
	NotFound string // default DefaultNotFound
	// Result is recorded when found; default {"http_status":N,"body":...}
	// of the lookup's answer.
	Result string
}

// The predicates of confirm_url, which a Confirm without its own keeps.
const (
	DefaultFound    = "status == 200"
	DefaultNotFound = "status == 404"
)

// FieldError is a problem with one field of an action, named as in the
// actions file ("headers.Authorization", "confirm.found"), so the loader
// can point at its line.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// IsZero reports whether a is Onceflight's own protocol.
func (a API) IsZero() bool {
	return a.Method == "" && a.Body == "" && a.BodyTemplate == "" && a.ContentType == "" &&
		a.IdempotencyHeader == "" && len(a.Headers) == 0 && a.BasicAuth == nil && a.OAuth2 == nil &&
		a.TLS.IsZero() && a.Signing == nil && a.RejectedWhen == "" && a.Result == "" && a.Confirm == nil &&
		a.Statuses.IsZero()
}

// header is one resolved request header.
type header struct{ name, value string }

// shape is an API compiled and with its secrets resolved: what Execute and
// Confirm need per request.
type shape struct {
	method      string
	url         *Template
	body        string
	bodyTmpl    *Template
	bodyMode    int // how bodyTmpl's values are escaped (bodyMode)
	contentType string
	idemHeader  string
	headers     []header
	basic       string // the Authorization value
	oauth       *clientcredentials.Config
	tls         *tls.Config
	signKey     []byte
	rejected    *Rule
	result      *Rule
	lookup      *lookup
	secrets     redactor

	// tokens caches the OAuth2 token: set by startOAuth (nil
	// without oauth2); renewToken drops a token the API refused.
	tokens   *tokenCache
	hasRules bool     // rejected or result set: Execute answers go through them
	statuses Statuses // codes the API gives a meaning of its own
	// extraHeaders is how many headers authorize and sign add to an
	// Execute request, so its header map is made large enough once.
	extraHeaders int
	// tok guards the last access token seen, so that each new one is
	// added to the redacted secrets once. Lock order: tok, then
	// secrets.mu (added under it); nothing else.
	tok struct {
		sync.Mutex
		last string
	}
}

// lookup is a compiled Confirm.
type lookup struct {
	method          string
	url             *Template
	headers         []header
	found, notFound *Rule
	result          *Rule
}

// reservedHeaders are set by the connector; a configured header may not
// replace them.
var reservedHeaders = []string{"Content-Type", "Content-Length", "Host", "Transfer-Encoding", "Connection", "Traceparent"}

var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// Check validates cfg's API without building a connector: templates, CEL
// rules, secret references (resolved, so an unset variable is caught) and
// TLS files. Every problem is a *FieldError.
func Check(cfg Config) []error {
	_, errs := compileShape(cfg)
	return errs
}

// compileShape compiles cfg.URL and cfg.API and resolves the secrets.
func compileShape(cfg Config) (*shape, []error) {
	a := cfg.API
	var errs []error
	fail := func(field string, err error) { errs = append(errs, &FieldError{field, err}) }
	s := &shape{
		method:      cmpOr(strings.ToUpper(a.Method), http.MethodPost),
		body:        cmpOr(a.Body, BodyJSON),
		contentType: "application/json",
		idemHeader:  http.CanonicalHeaderKey(cmpOr(a.IdempotencyHeader, DefaultIdempotencyHeader)),
	}
	var err error
	if s.url, err = ParseTemplate(cfg.URL); err != nil {
		fail("url", err)
	} else if err := checkTemplateURL(s.url); err != nil {
		fail("url", err)
	}
	if !headerName.MatchString(s.method) {
		fail("method", fmt.Errorf("invalid method %q", a.Method))
	}
	if !headerName.MatchString(s.idemHeader) {
		fail("idempotency_header", fmt.Errorf("invalid header name %q", a.IdempotencyHeader))
	}
	switch s.body {
	case BodyJSON, BodyForm:
		if a.BodyTemplate != "" {
			fail("body_template", fmt.Errorf("only with body: template"))
		}
		if a.ContentType != "" {
			fail("content_type", fmt.Errorf("only with body: template (json and form set their own)"))
		}
		if s.body == BodyForm {
			s.contentType = "application/x-www-form-urlencoded"
		}
	case BodyTemplate:
		if a.BodyTemplate == "" {
			fail("body_template", fmt.Errorf("required with body: template"))
		} else if strings.Contains(a.BodyTemplate, "${") {
			// Not resolved here: it would be sent as the literal text,
			// and a body is recorded where a header is not.
			fail("body_template", errors.New("secret references are not resolved in a body, which a result or an error message may quote: send the secret in a header"))
		} else if s.bodyTmpl, err = ParseTemplate(a.BodyTemplate); err != nil {
			fail("body_template", err)
		}
		s.contentType = cmpOr(a.ContentType, s.contentType)
		s.bodyMode = bodyMode(s.contentType)
	default:
		fail("body", fmt.Errorf("must be json, form or template, got %q", a.Body))
	}
	reserved := append(slices.Clone(reservedHeaders), s.idemHeader)
	if a.BasicAuth != nil || a.OAuth2 != nil {
		reserved = append(reserved, "Authorization")
	}
	if a.Signing != nil {
		reserved = append(reserved, "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature")
	}
	s.headers = s.resolveHeaders("headers", a.Headers, reserved, fail)
	if a.BasicAuth != nil && a.OAuth2 != nil {
		fail("oauth2", errors.New("basic_auth and oauth2 exclude each other"))
	}
	if b := a.BasicAuth; b != nil {
		user := s.resolve("basic_auth.username", b.Username, fail)
		pass := s.resolve("basic_auth.password", b.Password, fail)
		if strings.Contains(user, ":") {
			fail("basic_auth.username", errors.New("must not contain \":\""))
		}
		s.basic = basicValue(user, pass)
		s.secrets.add(s.basic, strings.TrimPrefix(s.basic, "Basic "))
	}
	if o := a.OAuth2; o != nil {
		if err := checkPlainURL(o.TokenURL); err != nil {
			fail("oauth2.token_url", err)
		}
		s.oauth = &clientcredentials.Config{
			TokenURL:     o.TokenURL,
			ClientID:     s.resolve("oauth2.client_id", o.ClientID, fail),
			ClientSecret: s.resolve("oauth2.client_secret", o.ClientSecret, fail),
			Scopes:       o.Scopes,
		}
	}
	if !a.TLS.IsZero() {
		if s.tls, err = a.TLS.Config(); err != nil {
			errs = append(errs, err)
		}
	}
	if g := a.Signing; g != nil {
		secret := s.resolve("signing.secret", g.Secret, fail)
		if secret != "" {
			key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
			if err != nil || len(key) == 0 {
				fail("signing.secret", errors.New("not a Standard Webhooks secret: want whsec_ followed by base64"))
			}
			s.signKey = key
		}
	}
	if a.RejectedWhen != "" {
		if s.rejected, err = CompilePredicate(a.RejectedWhen); err != nil {
			fail("rejected_when", err)
		}
	}
	if a.Result != "" {
		if s.result, err = CompileMapping(a.Result); err != nil {
			fail("result", err)
		}
	}
	s.hasRules = a.RejectedWhen != "" || a.Result != ""
	a.Statuses.check(fail)
	s.statuses = a.Statuses
	s.extraHeaders = len(s.headers)
	if a.BasicAuth != nil || a.OAuth2 != nil {
		s.extraHeaders++ // Authorization
	}
	if a.Signing != nil {
		s.extraHeaders += 3 // webhook-id, -timestamp, -signature
	}
	switch {
	case a.Confirm != nil && cfg.ConfirmURL != "":
		fail("confirm", errors.New("give confirm_url or confirm, not both"))
	case a.Confirm != nil:
		s.lookup = s.compileLookup(*a.Confirm, false, fail)
	case cfg.ConfirmURL != "" && !a.IsZero():
		// confirm_url with credentials: the same lookup through the
		// request path that sends them.
		s.lookup = s.compileLookup(Confirm{URL: cfg.ConfirmURL}, true, fail)
	}
	if s.tls != nil {
		// TLS settings on a plain-http request would be dropped without a
		// word, and the client certificate the user meant to prove who
		// is calling (and the credentials) would go unprotected.
		for _, u := range []struct {
			field string
			t     *Template
		}{{"url", s.url}, {"confirm.url", lookupURL(s.lookup)}} {
			if u.t != nil && strings.HasPrefix(strings.ToLower(u.t.Sample()), "http:") {
				fail("tls", fmt.Errorf("%s is http://, where tls settings do not apply: use https://", u.field))
			}
		}
	}
	return s, errs
}

func lookupURL(l *lookup) *Template {
	if l == nil {
		return nil
	}
	return l.url
}

// searchNeedsFound refuses a lookup that searches by a query with the
// default found rule: a search answers 200 {"data": []} when nothing
// matches, and "status == 200" would read that as "it happened" — a wrong
// confirmation, the worst answer the product can give. The user writes
// what found means for this API, even if it is "status == 200".
func searchNeedsFound(short bool) error {
	fix := `write found (and not_found) for the API's answer`
	if short {
		fix = `use confirm: with its url, found and not_found instead of confirm_url`
	}
	return fmt.Errorf(`the lookup searches by a query (a placeholder after "?"), and a search answers 200 with an empty list when nothing matches, which the default found rule %q would read as "it happened": %s, e.g. found: "status == 200 && size(body.data) > 0", not_found: "status == 200 && size(body.data) == 0"`, DefaultFound, fix)
}

// compileLookup compiles c; short: it is confirm_url with credentials.
func (s *shape) compileLookup(c Confirm, short bool, fail func(string, error)) *lookup {
	l := &lookup{method: cmpOr(strings.ToUpper(c.Method), http.MethodGet)}
	var err error
	if c.URL == "" {
		fail("confirm.url", errors.New("required"))
	} else if l.url, err = ParseTemplate(c.URL); err != nil {
		fail("confirm.url", err)
	} else if !l.url.HasPlaceholder() {
		fail("confirm.url", errors.New("has no placeholder such as {key}: it could not tell one attempt from another"))
	} else if err := checkTemplateURL(l.url); err != nil {
		fail("confirm.url", err)
	}
	if !headerName.MatchString(l.method) {
		fail("confirm.method", fmt.Errorf("invalid method %q", c.Method))
	}
	l.headers = s.resolveHeaders("confirm.headers", c.Headers, append(slices.Clone(reservedHeaders), s.idemHeader), fail)
	switch {
	case c.Found != "" || l.url == nil || !l.url.SearchesByQuery():
	case short:
		fail("confirm_url", searchNeedsFound(true))
	default:
		fail("confirm.found", searchNeedsFound(false))
	}
	if l.found, err = CompilePredicate(cmpOr(c.Found, DefaultFound)); err != nil {
		fail("confirm.found", err)
	}
	if l.notFound, err = CompilePredicate(cmpOr(c.NotFound, DefaultNotFound)); err != nil {
		fail("confirm.not_found", err)
	}
	if c.Result != "" {
		if l.result, err = CompileMapping(c.Result); err != nil {
			fail("confirm.result", err)
		}
	}
	return l
}

func (s *shape) resolve(field, v string, fail func(string, error)) string {
	out, vals, err := ResolveSecrets(v)
	if err != nil {
		fail(field, err)
		return ""
	}
	s.secrets.add(vals...)
	return out
}

func (s *shape) resolveHeaders(field string, hs map[string]string, reserved []string, fail func(string, error)) []header {
	var out []header
	for _, name := range slices.Sorted(mapKeys(hs)) {
		f := field + "." + name
		canon := http.CanonicalHeaderKey(name)
		switch {
		case !headerName.MatchString(name):
			fail(f, fmt.Errorf("invalid header name %q", name))
			continue
		case slices.Contains(reserved, canon), strings.HasPrefix(canon, "Onceflight-"):
			fail(f, fmt.Errorf("%s is set by the connector", canon))
			continue
		}
		v := s.resolve(f, hs[name], fail)
		if strings.ContainsAny(v, "\r\n") {
			fail(f, errors.New("the value contains a line break"))
			continue
		}
		if i := ctlIndex(v); i >= 0 {
			// net/http would refuse every request as "not sent" (the
			// system signalled down for good), fasthttp send it.
			fail(f, fmt.Errorf("the value has a control character (%U at byte %d), which a header cannot carry", rune(v[i]), i))
			continue
		}
		out = append(out, header{canon, v})
	}
	return out
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkTemplateURL checks a URL template with sample values: absolute,
// http or https, with a host, and no secret in it (a URL is logged and
// shown everywhere; send a secret in a header).
func checkTemplateURL(t *Template) error {
	if HasSecretRef(t.String()) || strings.Contains(t.String(), "${") {
		return errors.New("secrets are not allowed in a URL, which is shown in logs and by `onceflight actions`: send them in a header")
	}
	return checkPlainURL(t.Sample())
}

func checkPlainURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("invalid URL %q", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("invalid URL %q: scheme must be http or https", s)
	case u.Host == "":
		return fmt.Errorf("invalid URL %q: host missing", s)
	case u.User != nil:
		return errors.New("credentials in a URL are shown in logs: use basic_auth")
	}
	return nil
}

// startOAuth prepares the token source. Tokens are fetched over a transport
// of their own with the action's TLS settings, outside the deadline guard:
// on the guarded one a token request reusing an idle connection still
// armed with an earlier Execute's deadline would be refused, saved only by
// net/http resending it on a fresh connection. A fetch is bounded by the
// request's context (its attempt's deadline, the executor's stop) as well
// as by the client's own 10s timeout (tokenCache).
func (s *shape) startOAuth(base *http.Transport, foreign http.RoundTripper) {
	if s.oauth == nil {
		return
	}
	rt := foreign
	if base != nil {
		t := base.Clone()
		if s.tls != nil {
			t.TLSClientConfig = s.tls
		}
		rt = t
	}
	hc := &http.Client{Transport: rt, Timeout: 10 * time.Second,
		// A redirect is not followed: net/http would post the client
		// credentials again to wherever it points (the secret in the form,
		// which the oauth2 package falls back to, and Authorization to the
		// same host name on another port or over plain http). A token
		// endpoint's 3xx gives no token: not sent, retried
		// (ClassifyTokenError).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.tokens = &tokenCache{cfg: s.oauth, hc: hc, slot: make(chan struct{}, 1)}
}

// tokenCache is the OAuth2 client credentials token, fetched once and
// used until it expires (as oauth2.ReuseTokenSource, with its 10s of
// margin), fetched by one request at a time. Unlike ReuseTokenSource, a
// fetch and the wait for another's fetch end with the asking request's
// context: oauth2.TokenSource takes none, so a token endpoint that did not
// answer held an attempt past its deadline up to the client's 10s timeout
// (twice, as the oauth2 package tries a second way to send the client's
// credentials), and stopping the executor did not end it.
type tokenCache struct {
	cfg  *clientcredentials.Config
	hc   *http.Client  // the token endpoint's
	slot chan struct{} // held while fetching
	cur  atomic.Pointer[oauth2.Token]
}

// token is the cached token while it is valid, else a new one fetched
// within ctx.
func (c *tokenCache) token(ctx context.Context) (*oauth2.Token, error) {
	if t := c.cur.Load(); t.Valid() {
		return t, nil
	}
	select {
	case c.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.slot }()
	if t := c.cur.Load(); t.Valid() {
		return t, nil // fetched while this request waited
	}
	t, err := c.cfg.Token(context.WithValue(ctx, oauth2.HTTPClient, c.hc))
	if err != nil {
		return nil, err
	}
	c.cur.Store(t)
	return t, nil
}

// renewToken drops the cached token when the API refused it (401) though
// it had not expired by its expires_in — revoked, or the server lost it —
// so the next request fetches a new one instead of failing with the stale
// one until it expires. Concurrent requests refused with the same token
// renew it once.
func (s *shape) renewToken(stale string) {
	if t := s.tokens.cur.Load(); t != nil && t.AccessToken == stale {
		s.tokens.cur.CompareAndSwap(t, nil)
	}
}

// request is an Execute request's method, URL and body.
type request struct {
	method, url string
	body        []byte
}

// build expands the Execute request for req. An error means the command
// cannot be sent as configured (a data field the URL needs is missing):
// the effect did not and will not happen.
func (s *shape) build(req connectors.Request) (request, error) {
	out := request{method: s.method}
	needData := s.body != BodyJSON || len(s.url.DataPaths()) > 0 || (s.bodyTmpl != nil)
	var data any
	if needData {
		var err error
		if data, err = decodeData(req.Data); err != nil {
			return out, err
		}
	}
	var err error
	if out.url, err = s.url.expand(req, data, modeURL); err != nil {
		return out, err
	}
	switch s.body {
	case BodyForm:
		f, err := formEncode(data)
		if err != nil {
			return out, err
		}
		out.body = []byte(f)
	case BodyTemplate:
		b, err := s.bodyTmpl.expand(req, data, s.bodyMode)
		if err != nil {
			return out, err
		}
		out.body = []byte(b)
	default:
		out.body = []byte(req.Data)
		if len(out.body) == 0 {
			out.body = []byte("{}")
		}
	}
	return out, nil
}

// bodyMode is how a body template's values are escaped for contentType:
// JSON-escaped for a JSON type, form-escaped for a form — where a value
// with "&" or "=" would otherwise add or replace a field — and as they are
// otherwise.
func bodyMode(contentType string) int {
	mt, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	switch mt = strings.TrimSpace(mt); {
	case strings.Contains(mt, "json"):
		return modeJSON
	case mt == "application/x-www-form-urlencoded":
		return modeForm
	}
	return modeText
}

// authorize adds the configured headers and credentials to hr, and
// returns the OAuth2 access token it used, if any.
func (s *shape) authorize(ctx context.Context, hr *http.Request, extra []header) (string, error) {
	for _, h := range s.headers {
		hr.Header.Set(h.name, h.value)
	}
	for _, h := range extra {
		hr.Header.Set(h.name, h.value)
	}
	if s.basic != "" {
		hr.Header.Set("Authorization", s.basic)
	}
	if s.tokens == nil {
		return "", nil
	}
	tok, err := s.tokens.token(ctx)
	if err != nil {
		return "", fmt.Errorf("oauth2 token: %w", err)
	}
	s.tok.Lock()
	if tok.AccessToken != s.tok.last {
		s.tok.last = tok.AccessToken
		s.secrets.addToken(tok.AccessToken)
	}
	s.tok.Unlock()
	tok.SetAuthHeader(hr)
	return tok.AccessToken, nil
}

// ClassifyTokenError is what Execute makes of a failure to get an OAuth2
// token, when nothing was sent to the API: rejected when the token
// endpoint refused the client (a 4xx other than 408, 425, 429: a wrong
// client secret or scope, which waiting will not fix, so the record says
// failed with the endpoint's answer instead of retrying for give_up_after);
// unavailable otherwise (the endpoint unreachable, busy or failing).
// Exported so that `onceflight actions` describes what Execute does.
func ClassifyTokenError(err error) connectors.Kind {
	if re, ok := errors.AsType[*oauth2.RetrieveError](err); ok && re.Response != nil &&
		ClassifyStatus(re.Response.StatusCode) == connectors.Rejected {
		return connectors.Rejected
	}
	return connectors.Unavailable
}

// addsHeaders reports whether authorize or sign would add a header to an
// Execute request, by what they read (fixed headers, basic credentials, a
// token source, a signing key): a request without any is sent without
// the http.Request they write into (Connector.sendFast).
func (s *shape) addsHeaders() bool {
	return len(s.headers) > 0 || s.basic != "" || s.tokens != nil || s.signKey != nil
}

// sign adds the Standard Webhooks headers for body.
func (s *shape) sign(hr *http.Request, id string, body []byte, now time.Time) {
	if s.signKey == nil {
		return
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	hr.Header.Set("webhook-id", id)
	hr.Header.Set("webhook-timestamp", ts)
	hr.Header.Set("webhook-signature", "v1,"+WebhookSignature(s.signKey, id, ts, body))
}

// WebhookSignature is the Standard Webhooks v1 signature: base64 of
// HMAC-SHA256(key, id + "." + timestamp + "." + body). Exported for
// receivers written in Go, and for tests.
func WebhookSignature(key []byte, id, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + timestamp + "."))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// succeeded is a 2xx answer to Execute after rejected_when and result.
func (c *Connector) succeeded(req connectors.Request, code int, h http.Header, raw []byte, cut bool) connectors.Result {
	s := c.shape
	if !s.hasRules {
		return connectors.Result{Kind: connectors.Succeeded, Result: c.result(code, raw, cut)}
	}
	if s.rejected != nil && cut && s.rejected.readsBody {
		return connectors.Result{Kind: ClassifyRejectedWhen(false), Message: fmt.Sprintf("HTTP %d: rejected_when has no answer: it reads the body, which was cut short", code)}
	}
	a := newAnswer(req, code, h, raw)
	if s.rejected != nil {
		bad, err := s.rejected.holds(a)
		if err != nil {
			return connectors.Result{Kind: ClassifyRejectedWhen(false), Message: fmt.Sprintf("HTTP %d: rejected_when has no answer: %v", code, err)}
		}
		if bad {
			return connectors.Result{Kind: ClassifyRejectedWhen(true), Message: fmt.Sprintf("HTTP %d, rejected_when holds: %s", code, c.message(raw))}
		}
	}
	return connectors.Result{Kind: connectors.Succeeded, Result: c.mapped(s.result, a, cut)}
}

// ClassifyRejectedWhen is what Execute makes of a 2xx answer on which
// rejected_when holds (evaluated true): rejected; and of one on which it
// cannot be evaluated (evaluated false): ambiguous, because a 2xx says the
// effect may well have happened, so it is confirmed. Exported so that
// `onceflight actions` describes what Execute does.
func ClassifyRejectedWhen(evaluated bool) connectors.Kind {
	if evaluated {
		return connectors.Rejected
	}
	return connectors.Ambiguous
}

// mapped is the result rule's value, or the default result when there is
// no rule or it has no value for this answer (the effect happened either
// way; what is recorded must not turn it into a failure).
func (c *Connector) mapped(r *Rule, a answer, cut bool) json.RawMessage {
	if r != nil && !cut {
		if v, err := r.json(a); err == nil {
			return v
		}
	}
	return c.result(a.status, a.body, cut)
}

// redact scrubs the connector's secrets from what it returns.
func (c *Connector) redact(r connectors.Result) connectors.Result {
	r.Message = c.shape.secrets.string(r.Message)
	if len(r.Result) > 0 {
		r.Result = c.shape.secrets.bytes(r.Result)
	}
	return r
}
