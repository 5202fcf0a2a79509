// Package httpauth decides who may read the executor's records over HTTP
// (docs/http.md#who-may-read-the-records): a bearer token from a token file,
// or an identity header set by a trusted reverse proxy (oauth2-proxy, an
// ingress with OIDC). Records carry customer data, so every request to a
// guarded handler either names an Identity or gets 401 and nothing else.
//
// The package knows nothing of records: the record API guards its
// endpoints with Require, and the operator console is meant to use the same
// Authenticator and Role, so one token file and one proxy setup serve both.
package httpauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"
)

// Role is what an identity may do. The record API needs RoleReader;
// RoleOperator is the console's, for decisions (resolve, approve, release).
type Role string

const (
	// RoleReader may read records, entities and actions.
	RoleReader Role = "reader"
	// RoleOperator may also take operator decisions (where a server offers
	// them); it includes RoleReader.
	RoleOperator Role = "operator"
)

// ParseRole reads a role's name as written in a token file.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleReader, RoleOperator:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (want reader or operator)", s)
}

// Allows reports whether r includes need.
func (r Role) Allows(need Role) bool {
	switch r {
	case RoleOperator:
		return need == RoleOperator || need == RoleReader
	case RoleReader:
		return need == RoleReader
	}
	return false
}

// How an identity was established, in Identity.Method.
const (
	MethodToken = "token"
	MethodProxy = "proxy"
	// MethodNone is how a request was let through by a disabled
	// Authenticator (serve on a loopback address without authentication):
	// it names no identity.
	MethodNone = "none"
)

// Identity is who made a request: the name of its token, or the user the
// trusted proxy named. A decision taken in the console records Name as
// its author, so it comes from authentication, never from a form field.
type Identity struct {
	Name   string
	Role   Role
	Method string // MethodToken or MethodProxy
}

type ctxKey struct{}

// withIdentity returns ctx carrying id, for the handlers behind Require.
func withIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// Token is one line of a token file: a named bearer token with its role.
type Token struct {
	Name  string
	Role  Role
	Value string
}

// Authenticator establishes identities. A nil one has no method
// (Enabled is false): Authenticate accepts nobody and Require lets every
// request through, which the caller allows only where it is safe (serve:
// on a loopback address). Build one with New.
type Authenticator struct {
	// tokens are compared by their SHA-256, every one on every request, so
	// neither the position of a match nor a token's length shows in the
	// time a request takes.
	tokens []tokenHash
	// header, if not empty, carries the user's name when the request's
	// TCP peer is in proxies.
	header    string
	proxies   []netip.Prefix
	proxyRole Role
	log       *slog.Logger
}

type tokenHash struct {
	name string
	role Role
	sum  [sha256.Size]byte
}

// Option configures an Authenticator.
type Option func(*Authenticator)

// WithTokens accepts the bearer tokens ts (LoadTokenFile reads them).
func WithTokens(ts ...Token) Option {
	return func(a *Authenticator) {
		for _, t := range ts {
			a.tokens = append(a.tokens, tokenHash{name: t.Name, role: t.Role, sum: sha256.Sum256([]byte(t.Value))})
		}
	}
}

// WithTrustedProxy takes the user's name from header, but only on requests
// whose TCP peer address is in one of proxies: anyone else could set the
// header. X-Forwarded-For is not consulted, for the same reason. Proxy
// identities get role (RoleReader if empty).
func WithTrustedProxy(header string, proxies []netip.Prefix, role Role) Option {
	return func(a *Authenticator) {
		a.header = http.CanonicalHeaderKey(header)
		a.proxies = append(a.proxies, proxies...)
		a.proxyRole = role
	}
}

// WithLogger logs refused requests and record reads to l (default
// slog.Default()). Tokens and header values other than a valid user name
// are never logged.
func WithLogger(l *slog.Logger) Option {
	return func(a *Authenticator) { a.log = l }
}

// New returns an Authenticator; it fails on a proxy header without a
// trusted proxy, which would trust nobody and look as if it worked.
func New(opts ...Option) (*Authenticator, error) {
	a := &Authenticator{log: slog.Default()}
	for _, o := range opts {
		o(a)
	}
	if a.header != "" && len(a.proxies) == 0 {
		return nil, errors.New("a trusted proxy header needs the addresses of the trusted proxies")
	}
	if a.header == "" && len(a.proxies) > 0 {
		return nil, errors.New("trusted proxies need the header that carries the user's name")
	}
	if a.proxyRole == "" {
		a.proxyRole = RoleReader
	}
	return a, nil
}

// Enabled reports whether a is configured to accept anybody.
func (a *Authenticator) Enabled() bool {
	return a != nil && (len(a.tokens) > 0 || a.header != "")
}

// Describe names the configured methods, for the start-up log line.
func (a *Authenticator) Describe() string {
	if !a.Enabled() {
		return "none"
	}
	var m []string
	if len(a.tokens) > 0 {
		m = append(m, fmt.Sprintf("%d bearer token(s)", len(a.tokens)))
	}
	if a.header != "" {
		m = append(m, fmt.Sprintf("header %s from %d trusted proxy ranges", a.header, len(a.proxies)))
	}
	return strings.Join(m, ", ")
}

// maxUserBytes bounds a proxy-supplied user name.
const maxUserBytes = 256

// Authenticate returns the identity r proves, or why it proves none.
func (a *Authenticator) Authenticate(r *http.Request) (Identity, error) {
	if a == nil {
		return Identity{}, errNoMethod
	}
	if a.header != "" && a.fromProxy(r) {
		if vs := r.Header.Values(a.header); len(vs) > 0 {
			user := strings.TrimSpace(vs[0])
			// A comma is how HTTP joins repeated field lines into one
			// (RFC 9110 §5.3): a proxy that appends its user to a
			// client's header of the same name may send "mallory, alice"
			// as one line. Which part is the proxy's cannot be told, so
			// such a value is refused like two lines are.
			if len(vs) > 1 || user == "" || len(user) > maxUserBytes || !printable(user) || strings.Contains(user, ",") {
				return Identity{}, errBadProxyUser
			}
			return Identity{Name: user, Role: a.proxyRole, Method: MethodProxy}, nil
		}
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return Identity{}, errNoCredentials
	}
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Identity{}, errNotBearer
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	found := -1
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], a.tokens[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Identity{}, errBadToken
	}
	t := a.tokens[found]
	return Identity{Name: t.name, Role: t.role, Method: MethodToken}, nil
}

var (
	errNoMethod      = errors.New("no authentication is configured")
	errNoCredentials = errors.New("no credentials")
	errNotBearer     = errors.New("the Authorization header is not a bearer token")
	errBadToken      = errors.New("unknown bearer token")
	errBadProxyUser  = errors.New("the trusted proxy sent an empty, repeated or malformed user header")
)

// fromProxy reports whether r's TCP peer is a trusted proxy.
func (a *Authenticator) fromProxy(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range a.proxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// Require serves next only to requests whose identity has role need, with
// the identity in the request's context. Others get 401 with
// WWW-Authenticate: Bearer (no or wrong credentials) or 403 (a role too
// small), and a JSON error that says which, never next's answer.
//
// A nil or disabled a lets through without an identity every request
// addressed to a loopback name (LoopbackHost; the caller decides where
// that is allowed: serve only on a loopback address), and still logs each
// one as read by nobody in particular, so the log says who read what
// whichever way serve was started.
func (a *Authenticator) Require(need Role, next http.Handler) http.Handler {
	if !a.Enabled() {
		log := slog.Default()
		if a != nil && a.log != nil {
			log = a.log
		}
		return LoopbackHostOnly(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			log.Info("http: record access", accessAttrs(r, "", MethodNone)...)
			next.ServeHTTP(w, r)
		}))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.Authenticate(r)
		if err != nil {
			a.log.Warn("http: request refused: not authenticated", "reason", err.Error(), "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			challenge := `Bearer realm="onceflight"`
			if errors.Is(err, errBadToken) {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, "authentication required ("+err.Error()+"): send Authorization: Bearer TOKEN with a token of the server's --http-token-file")
			return
		}
		if !id.Role.Allows(need) {
			a.log.Warn("http: request refused: role too small", "identity", id.Name, "role", id.Role, "need", need, "method", r.Method, "path", r.URL.Path)
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s has role %s; this needs %s", id.Name, id.Role, need))
			return
		}
		a.log.Info("http: record access", accessAttrs(r, id.Name, id.Method)...)
		next.ServeHTTP(w, r.WithContext(withIdentity(r.Context(), id)))
	})
}

// accessAttrs are the attributes of a record read in the log: who, how,
// what (the path and query name keys, entities and statuses, never data;
// the body is never logged) and from where (the TCP peer; behind a proxy,
// the proxy).
func accessAttrs(r *http.Request, name, method string) []any {
	attrs := []any{"identity", name, "by", method, "method", r.Method, "path", r.URL.Path}
	if r.URL.RawQuery != "" {
		attrs = append(attrs, "query", r.URL.RawQuery)
	}
	return append(attrs, "remote", r.RemoteAddr)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// ErrNotLoopbackHost is the refusal of a request to a server without
// authentication whose Host header is not a loopback name.
var ErrNotLoopbackHost = errors.New("without authentication this server answers only requests addressed to 127.0.0.1, [::1] or localhost " +
	"(a web page could otherwise reach it through DNS rebinding); use one of those in the URL, or configure a token file")

// LoopbackHost reports whether a request's Host header names the loopback
// interface: 127.0.0.0/8, ::1, localhost or a name under .localhost
// (which browsers resolve to loopback themselves). A server that answers
// without authentication because it listens on loopback must also check
// this: a page on another site can make a browser's name for it resolve
// to 127.0.0.1 (DNS rebinding) and then read, as the same origin,
// whatever the server answers to that name. The browser still sends the
// page's name as Host, which this refuses.
func LoopbackHost(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsLoopback()
}

// clipHost bounds a logged Host header.
func clipHost(h string) string {
	if len(h) > 100 {
		return strings.ToValidUTF8(h[:100], "") + "…"
	}
	return h
}

// LoopbackHostOnly refuses with 403, and logs, every request not
// addressed to a loopback name (LoopbackHost): what listens on loopback
// without authentication must not be reached by a web page through DNS
// rebinding.
func LoopbackHostOnly(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !LoopbackHost(r.Host) {
			log.Warn("http: request refused: not addressed to a loopback name", "host", clipHost(r.Host), "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			writeError(w, http.StatusForbidden, ErrNotLoopbackHost.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Loopback reports whether addr (host:port) listens only on a loopback
// interface; an empty host listens on every interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// With returns a copy of a with opts applied: a listener that accepts one
// more credential (the ingress token) than the others.
func (a *Authenticator) With(opts ...Option) *Authenticator {
	c := &Authenticator{log: slog.Default()}
	if a != nil {
		c = &Authenticator{tokens: slices.Clone(a.tokens), header: a.header, proxies: slices.Clone(a.proxies), proxyRole: a.proxyRole, log: a.log}
	}
	for _, o := range opts {
		o(c)
	}
	if c.proxyRole == "" {
		c.proxyRole = RoleReader
	}
	return c
}

// ParseProxies reads trusted proxy addresses: CIDR ranges (10.0.0.0/8) or
// single addresses (127.0.0.1, ::1). It refuses a range of every address
// (0.0.0.0/0, ::/0): the header would be believed from anyone, so anyone
// could read the records as whoever they named.
func ParseProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			if p.Bits() == 0 {
				return nil, fmt.Errorf("%q is every address: the user header would be believed from anyone, who could then read the records as any name; list the proxies' own addresses (127.0.0.1 for a sidecar)", s)
			}
			out = append(out, p.Masked())
			continue
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR range (10.0.0.0/8, 127.0.0.1)", s)
		}
		out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
	}
	return out, nil
}
