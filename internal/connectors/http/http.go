// Package httpconn is the http connector of docs/connectors.md: Execute is a POST,
// Confirm a GET of confirm_url — or, with Config.API, a real API's own
// request and lookup, with its credentials (api.go, docs/connectors.md#calling-a-real-api).
//
// Two things about net/http matter for "no blind retry" (G3) and are handled
// here rather than left to defaults:
//
//   - http.Transport silently resends a request on a reused keep-alive
//     connection when reading the response fails, if it thinks the request is
//     replayable, and it treats a POST with an Idempotency-Key header as
//     replayable. Execute clears Request.GetBody so the POST is never
//     replayable: a resend is Perform's decision, after Confirm. A request
//     with no body (an empty one becomes http.NoBody) is replayable all
//     the same, so the guard of any connection after the one the request
//     was written on refuses it (sendState.once).
//   - The deadline must be checked right before the request's first byte is
//     written, not only before Do: a paused process can resume between the
//     two. The transport dials through a guard net.Conn; a ClientTrace
//     GotConn hook arms it with the attempt's deadline, and its Write refuses
//     (writing nothing) once the deadline has passed. The guard also counts
//     the bytes written, which is how a transport error is classified as
//     "not sent" (Unavailable) or "sent" (Ambiguous).
//
// HTTP/2 is disabled on the connector's transport: with multiplexed streams a
// connection's byte count is no longer one request's.
package httpconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/jcs"
)

// Config configures the connector (docs/configuration.md keys url, confirm_url, timeout).
type Config struct {
	URL        string
	ConfirmURL string        // with "{key}"; empty: the connector cannot confirm
	Timeout    time.Duration // per request, on top of the attempt's deadline; 0: none
	// Client is optional. If its Transport is an *http.Transport (or nil) it
	// is cloned and given the deadline guard; any other RoundTripper is used
	// as is, and then the deadline is only checked right before Do and every
	// transport error after the headers were produced counts as ambiguous.
	Client         *http.Client
	MaxResultBytes int // cap on the response body kept in a result; default 64 KiB
	// MaxConcurrent is how many requests may be in flight at once (the
	// system's ceiling): that many idle connections are kept unless
	// Transport says otherwise, so a busy executor reuses connections
	// instead of opening one per request (at 1024 in flight with 256 kept,
	// 8 003 connections for 10 000 POSTs). Default 256.
	MaxConcurrent int
	// Transport is how connections are made and kept (systems.<name>.http
	// in the actions file); zero fields take the defaults documented on
	// Transport. Ignored when Client has a RoundTripper of its own.
	Transport Transport
	// API is how to call a real API: credentials, request shape, the API's
	// own lookup (api.go). The zero API is the protocol described above.
	API API
}

// Transport is how the connector connects to its system. net/http's
// defaults suit a browser (2 idle connections per host, 30 s to dial); an
// executor has hundreds of requests in flight to one host, and every
// request that finds no idle connection pays a dial (and a TLS handshake)
// on top of the request: measured in BENCHMARKS.md.
type Transport struct {
	// MaxIdleConns is how many idle connections to the system are kept
	// for reuse. Default: the system's ceiling (max_concurrent, else
	// --max-inflight), at least 256.
	MaxIdleConns int
	// IdleTimeout closes a connection idle this long. Default 90s; keep
	// it below the system's (or its load balancer's) own keep-alive
	// timeout, or a request may go out on a connection the server is
	// closing — an ambiguous answer.
	IdleTimeout time.Duration
	// MaxConns caps the connections to the system, idle or not; a request
	// past it waits for one. Default 0: no cap beyond the system's
	// ceiling of requests in flight.
	MaxConns int
	// DialTimeout bounds connecting (TCP). Default 10s.
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake (within the request's
	// deadline, which bounds connecting too). Default 10s.
	TLSHandshakeTimeout time.Duration
	// KeepAlive is the interval of TCP keep-alive probes on open
	// connections. Default 30s.
	KeepAlive time.Duration
	// Client is what sends Execute's requests: ClientFast (fasthttp) or
	// ClientNetHTTP. Default: fasthttp where it applies (no Config.Client,
	// no proxy in the environment for the url, an http or https url), else
	// net/http. Requests to another origin than the url's (an API's url
	// template), requests under a recording trace span, the OAuth2 token
	// requests and Confirm always use net/http.
	Client string
}

// Transport defaults (docs/configuration.md#systems).
const (
	DefaultIdleTimeout         = 90 * time.Second
	DefaultDialTimeout         = 10 * time.Second
	DefaultTLSHandshakeTimeout = 10 * time.Second
	DefaultKeepAlive           = 30 * time.Second
	minIdleConns               = 256
)

// withDefaults fills the zero fields; ceiling is the requests in flight.
func (t Transport) withDefaults(ceiling int) Transport {
	if t.MaxIdleConns == 0 {
		t.MaxIdleConns = max(ceiling, minIdleConns)
	}
	if t.IdleTimeout == 0 {
		t.IdleTimeout = DefaultIdleTimeout
	}
	if t.DialTimeout == 0 {
		t.DialTimeout = DefaultDialTimeout
	}
	if t.TLSHandshakeTimeout == 0 {
		t.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if t.KeepAlive == 0 {
		t.KeepAlive = DefaultKeepAlive
	}
	return t
}

// apply sets t's settings on an http.Transport of the connector's own.
func (t Transport) apply(ht *http.Transport) {
	ht.MaxIdleConns = t.MaxIdleConns
	ht.MaxIdleConnsPerHost = t.MaxIdleConns
	ht.IdleConnTimeout = t.IdleTimeout
	ht.MaxConnsPerHost = t.MaxConns
	ht.TLSHandshakeTimeout = t.TLSHandshakeTimeout
	ht.DialContext = (&net.Dialer{Timeout: t.DialTimeout, KeepAlive: t.KeepAlive}).DialContext
}

// maxMessageBytes caps the error message taken from a rejection's body.
const maxMessageBytes = 512

// ErrDeadlinePassed is what the guard connection returns instead of writing
// once the attempt's deadline has passed.
var ErrDeadlinePassed = errors.New("deadline passed before the request was sent")

// Connector is the http connector. It implements connectors.Connector,
// connectors.Confirmer and connectors.CanConfirmer (true iff ConfirmURL is
// set). It is safe for concurrent use.
type Connector struct {
	cfg       Config
	client    *http.Client
	transport *http.Transport // nil when the caller's RoundTripper is foreign
	fast      *fastClient     // nil: Execute uses client (Transport.Client)
	shape     *shape          // cfg.API compiled, secrets resolved (api.go)
}

// New validates cfg and builds the connector.
func New(cfg Config) (*Connector, error) {
	if _, err := url.ParseRequestURI(cfg.URL); err != nil {
		return nil, fmt.Errorf("httpconn: url: %w", err)
	}
	if cfg.ConfirmURL != "" {
		if !strings.Contains(cfg.ConfirmURL, "{key}") {
			return nil, fmt.Errorf("httpconn: confirm_url %q has no {key}", cfg.ConfirmURL)
		}
		if _, err := url.ParseRequestURI(strings.ReplaceAll(cfg.ConfirmURL, "{key}", "k")); err != nil {
			return nil, fmt.Errorf("httpconn: confirm_url: %w", err)
		}
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 64 << 10
	}
	sh, errs := compileShape(cfg)
	if len(errs) > 0 {
		return nil, fmt.Errorf("httpconn: %w", errors.Join(errs...))
	}
	c := &Connector{cfg: cfg, shape: sh}
	client := &http.Client{}
	if cfg.Client != nil {
		*client = *cfg.Client
	}
	// Never follow redirects: following a 307 would send the POST again.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var base *http.Transport
	switch rt := client.Transport.(type) {
	case nil:
		base = http.DefaultTransport.(*http.Transport)
	case *http.Transport:
		base = rt
	}
	if base != nil {
		t := base.Clone()
		if client.Transport == nil {
			// Our own transport: the settings are explicit
			// configuration (Transport), not net/http's defaults.
			cfg.Transport.withDefaults(cfg.MaxConcurrent).apply(t)
		}
		dial := t.DialContext
		if dial == nil {
			dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		}
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &guardConn{Conn: conn}, nil
		}
		if sh.tls != nil {
			t.TLSClientConfig = sh.tls
		}
		t.ForceAttemptHTTP2 = false
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		client.Transport = t
		c.transport = t
	}
	if base == nil && sh.tls != nil {
		return nil, errors.New("httpconn: tls settings need an *http.Transport, the Client has another RoundTripper")
	}
	sh.startOAuth(base, client.Transport)
	client.Transport = traced(client.Transport)
	c.client = client
	name, implicit := cfg.Transport.Client, cfg.Transport.Client == ""
	if implicit {
		name = defaultClient
	}
	switch name {
	case ClientFast:
		if why := fastEligible(cfg); why != "" {
			if !implicit {
				return nil, fmt.Errorf("httpconn: client %s: %s", ClientFast, why)
			}
			break
		}
		f, err := newFastClient(cfg, cfg.Transport.withDefaults(cfg.MaxConcurrent), sh.tls)
		if err != nil {
			return nil, fmt.Errorf("httpconn: %w", err)
		}
		c.fast = f
	case ClientNetHTTP:
	default:
		return nil, fmt.Errorf("httpconn: client %q: want %s or %s", name, ClientFast, ClientNetHTTP)
	}
	return c, nil
}

// guardConn refuses to write once the deadline armed for the current request
// has passed, and counts what the current request wrote.
type guardConn struct {
	net.Conn
	// mu guards the deadline: armed by the round trip's goroutine,
	// read by the transport's writes. A leaf lock.
	mu struct {
		sync.Mutex
		deadline time.Time
		refused  error // refuse's: every write of the current request fails with it
	}
	written atomic.Int64
	peek    *peeker // the fasthttp path's look at an idle connection; nil on net/http's
}

// arm starts a new request on the connection (HTTP/1.1: one at a time).
func (g *guardConn) arm(deadline time.Time) {
	g.mu.Lock()
	g.mu.deadline, g.mu.refused = deadline, nil
	g.mu.Unlock()
	g.written.Store(0)
}

// refuse starts a request on the connection that must not be sent: its
// writes fail with err, writing nothing.
func (g *guardConn) refuse(err error) {
	g.mu.Lock()
	g.mu.refused = err
	g.mu.Unlock()
	g.written.Store(0)
}

func (g *guardConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	d, refused := g.mu.deadline, g.mu.refused
	g.mu.Unlock()
	if refused != nil {
		return 0, refused
	}
	if !d.IsZero() && !time.Now().Before(d) {
		return 0, ErrDeadlinePassed
	}
	n, err := g.Conn.Write(p)
	g.written.Add(int64(n))
	return n, err
}

func guardOf(c net.Conn) *guardConn {
	for c != nil {
		switch v := c.(type) {
		case *guardConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// errResend is what a guard answers net/http when it tries to send an
// Execute request again on another connection (sendState.once).
var errResend = errors.New("the connection ended after the request was sent, and it is not sent again")

// sendState tells, after a round trip, whether any byte of the request left.
type sendState struct {
	// once: the request goes out on one connection at most. http.Transport
	// sends a request again by itself, on another connection, when a
	// reused one ends before the answer and it deems the request
	// replayable: a GET, or a request with no body (which
	// NewRequestWithContext makes of an empty one: http.NoBody) and an
	// Idempotency-Key header — an Execute with a form body of data with no
	// field, or a template that expands to nothing. Clearing GetBody does
	// not stop that one, so a connection the transport gets after one the
	// request was written on refuses the request (errResend): it may have
	// been done, a resend is Perform's decision, after Confirm (G3).
	once bool
	// mu guards what the trace callbacks (the transport's goroutines)
	// note for the round trip to read after. A leaf lock.
	mu struct {
		sync.Mutex
		guard        *guardConn
		wroteHeaders bool
		wrote        bool // bytes of the request left on an earlier connection
	}
}

func (s *sendState) trace(deadline time.Time) *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			g := guardOf(info.Conn)
			s.mu.Lock()
			if prev := s.mu.guard; prev != nil && prev.written.Load() > 0 {
				// The transport waited for the earlier connection's
				// writes to end before getting another.
				s.mu.wrote = true
			}
			resend := s.once && s.mu.wrote
			s.mu.guard = g
			s.mu.Unlock()
			switch {
			case g == nil:
			case resend:
				g.refuse(errResend)
			default:
				g.arm(deadline)
			}
		},
		WroteHeaders: func() {
			s.mu.Lock()
			s.mu.wroteHeaders = true
			s.mu.Unlock()
		},
	}
}

// sent reports whether the request may have reached the server.
func (s *sendState) sent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.wrote {
		return true
	}
	if s.mu.guard != nil {
		return s.mu.guard.written.Load() > 0
	}
	return s.mu.wroteHeaders // foreign transport: conservative
}

// Execute POSTs req.Data to the configured URL (or sends the request
// Config.API shapes) and classifies the answer by docs/connectors.md.
func (c *Connector) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	return c.redact(c.execute(ctx, req, false))
}

// execute is Execute; renewed: the OAuth2 token was renewed after the API
// refused the cached one, so a second 401 is the answer.
func (c *Connector) execute(ctx context.Context, req connectors.Request, renewed bool) connectors.Result {
	if !req.Deadline.IsZero() && !time.Now().Before(req.Deadline) {
		return unavailable(ErrDeadlinePassed.Error())
	}
	if err := ctx.Err(); err != nil {
		return unavailable(fmt.Sprintf("not sent: %v", err))
	}
	if why := headerUnsafe(req); why != "" {
		return connectors.Result{Kind: connectors.Rejected, Message: "not sent: " + why}
	}
	ctx, cancel := c.requestContext(ctx, req.Deadline)
	defer cancel()
	out, err := c.shape.build(req)
	if err != nil {
		return connectors.Result{Kind: connectors.Rejected, Message: fmt.Sprintf("build request: %v", err)}
	}
	var rep reply
	if c.fast != nil && c.fast.serves(out.method, out.url) && !trace.SpanFromContext(ctx).IsRecording() {
		rep = c.sendFast(ctx, req, out)
	} else {
		rep = c.sendNet(ctx, req, out)
	}
	defer rep.release()
	if rep.res != nil {
		return *rep.res
	}
	if err := rep.err; err != nil {
		c.dropConnections()
		k := ClassifyTransportError(rep.sent)
		switch {
		case k == connectors.Ambiguous:
			return connectors.Result{Kind: k, Message: fmt.Sprintf("sent, no response: %v", err)}
		case errors.Is(err, ErrDeadlinePassed):
			return connectors.Result{Kind: k, Message: ErrDeadlinePassed.Error()}
		}
		res := connectors.Result{Kind: k, Message: fmt.Sprintf("not sent: %v", err)}
		if ctx.Err() == nil {
			// Not sent and not cut short by us: the system is
			// unreachable (connection refused, no route, DNS).
			res.Signal = connectors.SignalDown
		}
		return res
	}
	code, raw := rep.code, rep.raw
	if code == http.StatusUnauthorized && rep.token != "" && !renewed {
		// The API refused a token it handed out and that has not
		// expired by its expires_in (revoked, or lost by a restart):
		// nothing was done, so the same request goes once more with a
		// new token rather than failing every command until the old
		// one expires. Not when the action lists 401 as ambiguous
		// (statuses): it says such an answer may follow the effect, so
		// it is confirmed, not sent again; the next request gets the
		// new token.
		c.shape.renewToken(rep.token)
		if c.shape.statuses.ClassifyStatus(code) != connectors.Ambiguous {
			return c.execute(ctx, req, true)
		}
	}
	switch k := c.shape.statuses.ClassifyStatus(code); k {
	case connectors.Succeeded:
		// The status says it happened; a broken body does not change that.
		var h http.Header
		if c.shape.hasRules { // only rules read the answer's header
			h = rep.header()
		}
		return c.succeeded(req, code, h, raw, rep.truncated || rep.broken)
	case connectors.Ambiguous:
		c.dropConnections()
		return connectors.Result{Kind: k, Message: fmt.Sprintf("HTTP %d: %s", code, c.message(raw))}
	default:
		res := connectors.Result{Kind: k, Message: fmt.Sprintf("HTTP %d: %s", code, c.message(raw))}
		switch code {
		case http.StatusTooManyRequests:
			res.Signal = connectors.SignalBusy
		case http.StatusServiceUnavailable:
			res.Signal = connectors.SignalDown
		}
		// A code the API says means "not done" (statuses.not_done) says
		// an earlier request with the key may still be running, and may
		// carry a Retry-After like a 429.
		inFlight := c.shape.statuses.InFlight(code)
		res.InFlight = inFlight
		if res.Signal != connectors.SignalNone || inFlight {
			res.RetryAfter = RetryAfter(rep.header().Get("Retry-After"), time.Now())
			if res.RetryAfter > 0 {
				res.Message += fmt.Sprintf(" (Retry-After %s)", res.RetryAfter.Round(time.Millisecond))
			}
		}
		return res
	}
}

// reply is what became of one request, whichever client sent it.
type reply struct {
	res   *connectors.Result // decided before anything was sent
	token string             // the OAuth2 access token sent, if any
	// err: no answer; sent tells whether a byte of the request left.
	err  error
	sent bool
	// An answer: its status, its body (cut at MaxResultBytes: truncated),
	// broken when the body could not be read to its end.
	code      int
	raw       []byte
	truncated bool
	broken    bool
	hdr       http.Header
	fast      fastReply // the fast path's buffers (zero: none): raw points into them
}

// header is the answer's header; the fast path converts it only when asked.
func (r *reply) header() http.Header {
	if r.hdr == nil && r.fast.held() {
		r.hdr = fastHeader(r.fast.resp)
	}
	return r.hdr
}

func (r *reply) release() {
	if r.fast.held() {
		r.fast.release()
		r.fast = fastReply{}
	}
}

// prepare sets the protocol's headers and the shape's credentials and
// signature on hr; a reply with res set when the request cannot go.
func (c *Connector) prepare(ctx context.Context, hr *http.Request, req connectors.Request, body []byte) reply {
	hr.GetBody = nil // never replayable by the transport (see package doc)
	hr.Header = c.executeHeaders(req)
	token, err := c.shape.authorize(ctx, hr, nil)
	if err != nil {
		return reply{res: &connectors.Result{Kind: ClassifyTokenError(err), Message: fmt.Sprintf("not sent: %v", err)}}
	}
	c.shape.sign(hr, req.Key, body, time.Now())
	return reply{token: token}
}

// sendNet sends out with net/http, its sent state from the guard armed by
// a ClientTrace (package doc).
func (c *Connector) sendNet(ctx context.Context, req connectors.Request, out request) reply {
	st := &sendState{once: true}
	hr, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, st.trace(req.Deadline)), out.method, out.url, bytes.NewReader(out.body))
	if err != nil {
		return reply{res: &connectors.Result{Kind: connectors.Rejected, Message: fmt.Sprintf("build request: %v", err)}}
	}
	rep := c.prepare(ctx, hr, req, out.body)
	if rep.res != nil {
		return rep
	}
	resp, err := c.client.Do(hr)
	if err != nil {
		rep.err, rep.sent = err, st.sent()
		return rep
	}
	defer resp.Body.Close()
	raw, truncated, rerr := c.readBody(resp.Body)
	rep.code, rep.hdr, rep.raw, rep.truncated, rep.broken = resp.StatusCode, resp.Header, raw, truncated, rerr != nil
	return rep
}

// sendFast sends out with fasthttp (fast.go). The request is shaped on
// an http.Request's header, as on the net/http path, so that credentials
// and signatures are set by the same code; a shape that adds no header of
// its own (no headers, credentials or signing: shape.addsHeaders) has its
// protocol headers written straight into the fasthttp request, without
// the http.Request and header map it would only copy from.
func (c *Connector) sendFast(ctx context.Context, req connectors.Request, out request) reply {
	var rep reply
	var h http.Header
	if c.shape.addsHeaders() {
		hr := &http.Request{}
		if rep = c.prepare(ctx, hr, req, out.body); rep.res != nil {
			return rep
		}
		h = hr.Header
	}
	fr := c.fast.request(out.method, out.url, out.body)
	if h != nil {
		fr.addHeader(h)
	} else {
		c.protocolHeaders(req, fr.req.Header.Add)
		fr.req.Header.SetUserAgent(netUserAgent)
	}
	sent, broken, err := c.fast.send(ctx, fr)
	rep.fast = fr
	if err != nil {
		rep.err, rep.sent = err, sent
		return rep
	}
	rep.code, rep.raw, rep.broken = fr.resp.StatusCode(), fr.resp.Body(), broken
	if len(rep.raw) > c.cfg.MaxResultBytes {
		rep.raw, rep.truncated = rep.raw[:c.cfg.MaxResultBytes], true
	}
	if rep.truncated || rep.broken {
		rep.raw = c.shape.secrets.trimPartial(rep.raw)
	}
	if c.shape.hasRules {
		// Rules may keep the body past release.
		rep.raw = bytes.Clone(rep.raw)
	}
	return rep
}

// protocolHeaders is how many headers executeHeaders sets at most.
const protocolHeaders = 8

// executeHeaders are Execute's protocol headers (docs/connectors.md), in a
// map sized for them and for the shape's own, with the values in one
// array: set one by one, every value is a slice of its own and the map
// grows twice, a dozen allocations per request where a busy executor
// sends thousands a second.
func (c *Connector) executeHeaders(req connectors.Request) http.Header {
	hs := headerSlab{
		h:    make(http.Header, protocolHeaders+c.shape.extraHeaders),
		vals: make([]string, 0, protocolHeaders),
	}
	c.protocolHeaders(req, hs.set)
	return hs.h
}

// protocolHeaders calls set with each of Execute's protocol headers
// (docs/connectors.md), each name once and written canonical, as Set
// would.
func (c *Connector) protocolHeaders(req connectors.Request, set func(key, value string)) {
	set("Content-Type", c.shape.contentType)
	set(c.shape.idemHeader, req.Key) // canonical since compileShape
	set("Onceflight-Entity", req.Entity)
	set("Onceflight-Action", req.Action)
	set("Onceflight-Attempt", strconv.Itoa(req.Attempt))
	if !req.Deadline.IsZero() {
		set("Onceflight-Deadline", req.Deadline.UTC().Format(time.RFC3339Nano))
	}
	set("Onceflight-Fencing-Token", strconv.FormatInt(req.FencingToken, 10))
	if req.TraceParent != "" {
		set("Traceparent", req.TraceParent)
	}
}

// headerUnsafe says why a header value taken from the command (its
// entity, idempotency key, traceparent) cannot be written, or "" if all
// can. A header value holds no control character but a tab (RFC 9110
// §5.5). net/http refuses such a request before sending it, which read as
// "not sent" with the system signalled down — one malformed command
// opening the system's breaker and retried until give_up_after — while
// fasthttp turns CR and LF into spaces and sends the rest: another entity
// than the command's. The command cannot be sent as it is: rejected. The
// value is described by position, never echoed.
func headerUnsafe(req connectors.Request) string {
	for _, f := range [...]struct{ name, v string }{
		{"entity", req.Entity}, {"idempotency key", req.Key}, {"traceparent", req.TraceParent},
	} {
		if i := ctlIndex(f.v); i >= 0 {
			return fmt.Sprintf("the %s has a control character (%U at byte %d), which an HTTP header cannot carry", f.name, rune(f.v[i]), i)
		}
	}
	return ""
}

// ctlIndex is the index of the first byte of s that a header value cannot
// hold — a control character other than a tab (RFC 9110 §5.5) — or -1.
func ctlIndex(s string) int {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 && b != '\t' || b == 0x7f {
			return i
		}
	}
	return -1
}

// headerSlab sets single-valued headers whose values share one array.
// Each value's slice is capped at its length, so a later Add to the same
// header copies instead of overwriting its neighbour.
type headerSlab struct {
	h    http.Header
	vals []string
}

func (s *headerSlab) set(key, v string) {
	s.vals = append(s.vals, v)
	n := len(s.vals)
	s.h[key] = s.vals[n-1 : n : n]
}

// RetryAfter reads an HTTP Retry-After value (RFC 9110 §10.2.3): a number
// of seconds or an HTTP date, relative to now. Anything else, or a time
// already past, is 0: no wish beyond the usual backoff.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Beyond a day is a broken header, not a wish; a day is
		// longer than any give_up_after worth having anyway.
		return time.Duration(min(secs, 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), 24*time.Hour)
	}
	return 0
}

// ClassifyStatus is what Execute makes of an HTTP status: 2xx succeeded;
// 408, 425, 429, 503 unavailable (not done, retry); other 4xx rejected;
// anything else ambiguous (500, 502, 504 per SPEC, and statuses the SPEC
// does not list, such as an unfollowed 3xx or 501, on the safe side).
// Exported so that `onceflight actions` describes what Execute does.
func ClassifyStatus(code int) connectors.Kind {
	switch {
	case code >= 200 && code < 300:
		return connectors.Succeeded
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests, code == http.StatusServiceUnavailable:
		return connectors.Unavailable
	case code >= 400 && code < 500:
		return connectors.Rejected
	}
	return connectors.Ambiguous
}

// ClassifyTransportError is what Execute makes of a request that got no
// response: unavailable if no byte of it was written (connection refused,
// DNS failure, deadline passed before sending), ambiguous once it was sent
// (a timeout or reset while waiting for the answer).
func ClassifyTransportError(sent bool) connectors.Kind {
	if sent {
		return connectors.Ambiguous
	}
	return connectors.Unavailable
}

// CanConfirm reports whether a confirm_url or an API lookup is configured.
func (c *Connector) CanConfirm() bool { return c.cfg.ConfirmURL != "" || c.shape.lookup != nil }

// Confirm GETs confirm_url for req.Key: 200 Succeeded, 404 NotFound,
// anything else (or no answer) Ambiguous, meaning still unknown. With an
// API lookup the API's own rules decide (confirmByLookup).
func (c *Connector) Confirm(ctx context.Context, req connectors.Request) (res connectors.Result) {
	defer func() { res = c.redact(res) }()
	if c.shape.lookup != nil {
		return c.confirmByLookup(ctx, req)
	}
	if c.cfg.ConfirmURL == "" {
		return connectors.Result{Kind: connectors.Ambiguous, Message: "no confirm_url configured"}
	}
	if isDotSegment(req.Key) {
		return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("confirm: the key %q in confirm_url's path would name another resource once a proxy decodes and normalizes it (a dot-segment): not asked", req.Key)}
	}
	ctx, cancel := c.requestContext(ctx, time.Time{})
	defer cancel()
	u := strings.ReplaceAll(c.cfg.ConfirmURL, "{key}", escapeKey(req.Key))
	st := &sendState{}
	hr, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, st.trace(time.Time{})), http.MethodGet, u, nil)
	if err != nil {
		return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("build confirm request: %v", err)}
	}
	hr.Header.Set("Idempotency-Key", req.Key)
	resp, err := c.client.Do(hr)
	if err != nil {
		c.dropConnections()
		return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("confirm: %v", err)}
	}
	defer resp.Body.Close()
	raw, truncated, rerr := c.readBody(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		if rerr != nil {
			return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("confirm: read body: %v", rerr)}
		}
		return connectors.Result{Kind: connectors.Succeeded, Result: c.result(http.StatusOK, raw, truncated)}
	case http.StatusNotFound:
		return connectors.Result{Kind: connectors.NotFound}
	}
	return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("confirm: HTTP %d: %s", resp.StatusCode, c.message(raw))}
}

// escapeKey is the key as it replaces {key} in confirm_url: URL-escaped as a
// path segment (url.PathEscape, so "/" is %2F) and, for a key made only of
// dots, with every dot escaped too ("." and ".." are not even sent:
// isDotSegment). url.PathEscape leaves "." and ".." as
// they are, and a path segment "." or ".." is a dot-segment that clients,
// proxies and servers remove (RFC 3986 §5.2.4): GET /refunds/.. would ask
// about the collection (or its parent) instead of the key, and a 404 there
// would let the key run again. %2E is not a dot-segment, and decodes back to
// the key.
func escapeKey(key string) string {
	if key != "" && strings.Trim(key, ".") == "" {
		return strings.Repeat("%2E", len(key))
	}
	return url.PathEscape(key)
}

// requestContext bounds a request by the earlier of deadline (zero: none)
// and now + Timeout. When ctx already ends no later (an attempt's context
// carries its deadline), no timer of its own is made: one request, one
// timer at most, rather than one per layer.
func (c *Connector) requestContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if c.cfg.Timeout > 0 {
		if t := time.Now().Add(c.cfg.Timeout); deadline.IsZero() || t.Before(deadline) {
			deadline = t
		}
	}
	if deadline.IsZero() {
		return ctx, func() {}
	}
	if d, ok := ctx.Deadline(); ok && !d.After(deadline) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// dropConnections closes idle connections after a failure, so no request
// goes out on a connection whose state is in doubt. The failed connection
// itself is already closed by the transport.
func (c *Connector) dropConnections() {
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	if c.fast != nil {
		c.fast.hc.CloseIdleConnections()
	}
}

// readBody reads at most MaxResultBytes, draining a little more so the
// connection can be reused. A body cut short loses a secret's start at its
// end (redactor.trimPartial).
func (c *Connector) readBody(r io.Reader) (body []byte, truncated bool, err error) {
	body, err = io.ReadAll(io.LimitReader(r, int64(c.cfg.MaxResultBytes)+1))
	if len(body) > c.cfg.MaxResultBytes {
		body, truncated = body[:c.cfg.MaxResultBytes], true
		_, _ = io.CopyN(io.Discard, r, 64<<10)
	}
	if truncated || err != nil {
		body = c.shape.secrets.trimPartial(body)
	}
	return body, truncated, err
}

// result is {"http_status":N,"body":...}: the body as JSON when it is JSON,
// else as a string; when cut at MaxResultBytes it is always a string and
// "body_truncated":true says so. The bytes are json.Marshal's of that
// object (compacted, HTML-escaped), written directly: every successful
// request makes one, and the reflection and boxing cost more than the
// request's own headers.
func (c *Connector) result(status int, raw []byte, truncated bool) json.RawMessage {
	out := bytes.NewBuffer(make([]byte, 0, len(raw)+64))
	out.WriteString(`{"http_status":`)
	out.Write(strconv.AppendInt(out.AvailableBuffer(), int64(status), 10))
	if len(bytes.TrimSpace(raw)) > 0 {
		out.WriteString(`,"body":`)
		start := out.Len()
		// Compacted in place (Compact writes nothing when raw is not
		// JSON), then HTML-escaped only when it has a byte to escape.
		if !truncated && json.Compact(out, raw) == nil && hasRecordForm(out.Bytes()[start:]) {
			if body := out.Bytes()[start:]; mayEscapeHTML(body) {
				compact := bytes.Clone(body)
				out.Truncate(start)
				json.HTMLEscape(out, compact)
			}
		} else {
			out.Truncate(start) // a compacted body without a record form
			s, err := json.Marshal(strings.ToValidUTF8(string(raw), "\uFFFD"))
			if err != nil { // cannot happen: a valid UTF-8 string
				return json.RawMessage(fmt.Sprintf(`{"http_status":%d}`, status))
			}
			out.Write(s)
		}
	}
	if truncated {
		out.WriteString(`,"body_truncated":true`)
	}
	out.WriteByte('}')
	return out.Bytes()
}

// hasRecordForm reports whether the JSON body has an RFC 8785 form, which
// the record that keeps the result is hashed over: not every JSON text
// has one (a number beyond an IEEE 754 double, nesting deeper than the
// canonicalizer follows). A body without one is kept as a string, as a
// body that is not JSON is: kept as JSON, the succeeded record could not
// be journaled nor its outcome published, and the effect that happened
// would have no final record. A scan that writes nothing (jcs.HasJCSForm).
func hasRecordForm(body []byte) bool { return jcs.HasJCSForm(body) }

// mayEscapeHTML reports whether json.HTMLEscape could change b: it has a
// '<', '>' or '&', or the first byte of U+2028 or U+2029 (and of other
// characters, which HTMLEscape leaves alone).
func mayEscapeHTML(b []byte) bool {
	for _, c := range b {
		if c == '<' || c == '>' || c == '&' || c == 0xE2 {
			return true
		}
	}
	return false
}

// message is message(raw) with the connector's secrets redacted first: a
// secret straddling the cap would be cut in two, and its first part no
// longer match the redaction of what Execute returns.
func (c *Connector) message(raw []byte) string { return message(c.shape.secrets.bytes(raw)) }

// message is a rejection's reason: the JSON "message" or "error" string
// field if there is one, else the text, capped.
func message(raw []byte) string {
	var v struct {
		Message any `json:"message"`
		Error   any `json:"error"`
	}
	s := ""
	if json.Unmarshal(raw, &v) == nil {
		if m, ok := v.Message.(string); ok && m != "" {
			s = m
		} else if m, ok := v.Error.(string); ok && m != "" {
			s = m
		}
	}
	if s == "" {
		s = strings.TrimSpace(string(raw))
	}
	if len(s) > maxMessageBytes {
		s = strings.ToValidUTF8(s[:maxMessageBytes], "") + "…(truncated)"
	}
	return s
}

func unavailable(msg string) connectors.Result {
	return connectors.Result{Kind: connectors.Unavailable, Message: msg}
}
