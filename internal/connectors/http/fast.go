package httpconn

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// The clients Execute can send with (Transport.Client, systems.<name>.http.client).
const (
	// ClientFast sends Execute's requests with fasthttp's HostClient: no
	// goroutine per connection and pooled requests, responses and
	// buffers, about a third of net/http's CPU per request
	// (BENCHMARKS.md, round 14). The default where it applies (fastEligible).
	ClientFast = "fasthttp"
	// ClientNetHTTP sends every request with net/http.
	ClientNetHTTP = "net/http"
)

// defaultClient is the client of a Transport that names none (a variable
// so that the package's tests run on both).
var defaultClient = ClientFast

// fastConnWait is how long a request waits for a connection when
// Transport.MaxConns are all busy and it has no deadline of its own; past
// it the request is not sent (unavailable).
const fastConnWait = time.Minute

// fastClient sends Execute's requests to the system's one host over
// fasthttp's connection pool, with a round trip of the connector's own
// (roundTrip) rather than HostClient.Do: Do's loop is the only place
// fasthttp sends a request again (when RetryIf or RetryIfErr allows: by
// default a GET, HEAD or PUT, and an API's method may be PUT), so leaving
// it out means a request goes out at most once by construction; a resend
// is Perform's decision, after Confirm. MaxIdemponentCallAttempts and
// RetryIfErr are set to never retry as well, should anything call Do.
//
// Every connection is dialed through a guardConn, with TLS handshaken at
// dial time, so that a request's guard counts only the request's own
// bytes: a transport error is "not sent" (unavailable) exactly when no
// byte of the request was written, as with net/http.
type fastClient struct {
	hc *fasthttp.HostClient
	// origin is "scheme://host[:port]" of the configured URL: a request
	// whose URL (from an API's url template) names another origin goes
	// through net/http.
	origin  string
	maxBody int // the response body read at most: MaxResultBytes + 64 KiB
	maxIdle int // idle connections kept; more are closed when released
}

// fastEligible reports why Execute cannot use fasthttp for cfg, or ""
// when it can: a caller's own http.Client, a proxy from the environment
// (fasthttp does not read HTTP_PROXY), a URL other than http or https.
func fastEligible(cfg Config) string {
	if cfg.Client != nil {
		return "Config.Client is set"
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return "the url is not a plain http or https url"
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return "a proxy is set in the environment for the url"
	}
	return ""
}

// newFastClient builds the fasthttp client for cfg's URL with t's
// settings (defaults applied) and tlsCfg (nil: the system's defaults).
func newFastClient(cfg Config, t Transport, tlsCfg *tls.Config) (*fastClient, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	isTLS := u.Scheme == "https"
	addr := fasthttp.AddMissingPort(u.Host, isTLS)
	if isTLS {
		if tlsCfg == nil {
			tlsCfg = &tls.Config{}
		}
		tlsCfg = tlsCfg.Clone()
		if tlsCfg.ServerName == "" {
			tlsCfg.ServerName = u.Hostname()
		}
		tlsCfg.NextProtos = []string{"http/1.1"}
	}
	maxConns := t.MaxConns
	if maxConns <= 0 {
		// No cap beyond the system's ceiling of requests in flight,
		// which the executor enforces.
		maxConns = 1 << 30
	}
	dial := func(addr string, timeout time.Duration) (net.Conn, error) {
		// timeout is what is left of the request's deadline (0: none):
		// it bounds the handshake as well as the connect, so that
		// connecting never outlasts the attempt (net/http bounds both
		// by the request's context).
		var end time.Time
		if timeout > 0 {
			end = time.Now().Add(timeout)
		}
		if timeout <= 0 || timeout > t.DialTimeout {
			timeout = t.DialTimeout
		}
		d := net.Dialer{Timeout: timeout, KeepAlive: t.KeepAlive}
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		g := &guardConn{Conn: conn, peek: newPeeker(conn)}
		if !isTLS {
			return g, nil
		}
		// Handshaken here, before any request is armed on the
		// connection: the handshake's bytes are not a request's.
		tc := tls.Client(g, tlsCfg)
		if hs := time.Now().Add(t.TLSHandshakeTimeout); end.IsZero() || hs.Before(end) {
			end = hs
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		defer cancel()
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return tc, nil
	}
	hc := &fasthttp.HostClient{
		Addr:                          addr,
		IsTLS:                         isTLS,
		DialTimeout:                   dial,
		MaxConns:                      maxConns,
		MaxConnWaitTimeout:            fastConnWait,
		MaxIdleConnDuration:           t.IdleTimeout,
		MaxIdemponentCallAttempts:     1,
		RetryIfErr:                    func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		DisableHeaderNamesNormalizing: true, // names go as net/http would send them
		DisablePathNormalizing:        true, // the URL goes as configured
		NoDefaultUserAgentHeader:      true,
		MaxResponseBodySize:           cfg.MaxResultBytes + 64<<10,
	}
	return &fastClient{hc: hc, origin: u.Scheme + "://" + u.Host, maxBody: hc.MaxResponseBodySize, maxIdle: t.MaxIdleConns}, nil
}

// serves reports whether the request goes through fasthttp: rawURL on the
// client's origin, and a method whose body fasthttp sends (it drops a GET's
// or HEAD's body, which net/http sends).
func (f *fastClient) serves(method, rawURL string) bool {
	if method == http.MethodGet || method == http.MethodHead {
		return false
	}
	rest, ok := strings.CutPrefix(rawURL, f.origin)
	return ok && (rest == "" || rest[0] == '/' || rest[0] == '?')
}

// netUserAgent is what net/http sends when a request sets none; the fast
// path sends the same, so a system sees no difference.
const netUserAgent = "Go-http-client/1.1"

// fastReply is a request's answer on the fast path; release gives its
// buffers back once the answer is classified.
type fastReply struct {
	resp *fasthttp.Response
	req  *fasthttp.Request
}

// held reports whether r holds a pooled request and response (the zero
// fastReply holds neither: the net/http path's reply).
func (r fastReply) held() bool { return r.req != nil }

func (r fastReply) release() {
	fasthttp.ReleaseRequest(r.req)
	fasthttp.ReleaseResponse(r.resp)
}

// request is a pooled request for method rawURL with body, and its
// response, for send; the caller adds the headers (addHeader, or
// req.Header's own methods) and releases both once the answer is read.
func (f *fastClient) request(method, rawURL string, body []byte) fastReply {
	r := fastReply{req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
	req := r.req
	req.Header.DisableNormalizing()
	req.SetRequestURI(rawURL)
	req.URI().DisablePathNormalizing = true // HostClient.Do would set it; roundTrip is not Do
	req.Header.SetMethod(method)
	req.SetBodyRaw(body)
	return r
}

// addHeader adds h to the request, and net/http's User-Agent when h sets
// none.
func (r fastReply) addHeader(h http.Header) {
	for k, vs := range h {
		for _, v := range vs {
			r.req.Header.Add(k, v)
		}
	}
	if len(h["User-Agent"]) == 0 {
		r.req.Header.SetUserAgent(netUserAgent)
	}
}

// send sends r's request, bounded by ctx (its deadline, and its
// cancellation), and reads the answer into r's response. sent tells, when
// err is not nil, whether any byte of the request was written; a nil err
// means answered, with broken set when the answer's body could not be read
// to its end.
func (f *fastClient) send(ctx context.Context, r fastReply) (sent, broken bool, err error) {
	deadline, _ := ctx.Deadline()
	return f.roundTrip(ctx, r.req, r.resp, deadline)
}

// aLongTimeAgo is a deadline that makes a connection's pending and future
// reads and writes fail at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes req on a pooled connection and reads its answer into
// resp, once: no path here sends req again.
func (f *fastClient) roundTrip(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) (sent, broken bool, err error) {
	// wait is what is left of the deadline, for the pool's wait for a
	// connection (0: none given).
	wait := func() (time.Duration, error) {
		if deadline.IsZero() {
			return 0, nil
		}
		if left := time.Until(deadline); left > 0 {
			return left, nil
		}
		return 0, ErrDeadlinePassed
	}
	timeout, err := wait()
	if err != nil {
		return false, false, err
	}
	if err := ctx.Err(); err != nil {
		return false, false, err
	}
	// A pooled connection the system closed while it was idle is passed
	// over (nothing is sent on it): net/http's reading goroutine per
	// connection notices such a close at once and drops the connection;
	// the pool has no reader, so it is looked for here, before a request
	// is written into it.
	cc, err := f.hc.AcquireConn(timeout, false)
	for err == nil && !cc.LastUseTime().IsZero() && peerDone(cc.Conn()) {
		f.hc.CloseConn(cc)
		if timeout, err = wait(); err == nil {
			cc, err = f.hc.AcquireConn(timeout, false)
		}
	}
	if err != nil {
		return false, false, err
	}
	conn := cc.Conn()
	g := guardOf(conn)
	if g == nil { // cannot happen: every connection is dialed by newFastClient
		f.hc.CloseConn(cc)
		return false, false, errors.New("httpconn: fasthttp connection without its guard")
	}
	g.arm(deadline)
	if err := conn.SetDeadline(deadline); err != nil {
		f.hc.CloseConn(cc)
		return false, false, err
	}
	// The context's cancellation (a shutdown) interrupts the request like
	// its deadline does; set after SetDeadline, which would undo it.
	stop := func() bool { return true }
	if done := cancellation(ctx); done.Done() != nil {
		stop = context.AfterFunc(done, func() { _ = conn.SetDeadline(aLongTimeAgo) })
	}
	bw := f.hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	f.hc.ReleaseWriter(bw)
	if err != nil {
		stop()
		f.hc.CloseConn(cc)
		return g.written.Load() > 0, false, f.cause(ctx, err)
	}
	br := f.hc.AcquireReader(conn)
	answered, err := readResponse(br, resp, f.maxBody)
	f.hc.ReleaseReader(br)
	interrupted := !stop()
	switch {
	case err != nil || interrupted || resp.ConnectionClose() || f.hc.IdleConnsCount() >= f.maxIdle:
		f.hc.CloseConn(cc)
	default:
		f.hc.ReleaseConn(cc)
	}
	if err != nil && !answered {
		return true, false, f.cause(ctx, err)
	}
	return true, err != nil, nil
}

// canceller is a context that names the context whose end, short of its
// own deadline, ends it: Perform's attempt context names its parent (package
// effect, deadlineCtx.Cancellation).
type canceller interface {
	Cancellation() context.Context
}

// cancellation is what roundTrip waits on besides the connection's
// deadline, which is already ctx's: ctx's Cancellation when it has one,
// else ctx. Perform's attempt context makes a context and a timer of its
// deadline's own once asked for Done; its parent has both already.
func cancellation(ctx context.Context) context.Context {
	if c, ok := ctx.(canceller); ok {
		if p := c.Cancellation(); p != nil {
			return p
		}
	}
	return ctx
}

// peerDone reports whether the system closed c (a connection of the pool)
// while it was idle.
func peerDone(c net.Conn) bool {
	g := guardOf(c)
	return g != nil && g.peek.peerDone()
}

// cause is err, or the context's error when the context ended first (the
// connection's deadline then shows as a timeout).
func (f *fastClient) cause(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, ErrDeadlinePassed) {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}

// maxHeaderBytes is the longest answer header the fast path reads: what
// net/http's Transport reads by default (MaxResponseHeaderBytes 0).
const maxHeaderBytes = 10 << 20

// readResponse reads an answer's header (past any 1xx) and then its body,
// as Response.ReadLimitBody does, but tells the two apart: answered is
// true once a final status was read, so an error after it is a broken
// body (the status stands, as on the net/http path), not a request
// without an answer.
//
// A header longer than br's buffer (fasthttp's ErrSmallBuffer: nothing of
// it was consumed) is read again through a larger buffer, up to
// maxHeaderBytes as net/http: a 201, 422 or 429 with a long header is an
// answer, not "sent, no response".
func readResponse(br *bufio.Reader, resp *fasthttp.Response, maxBody int) (answered bool, err error) {
	for n := 0; ; n++ {
		if err := resp.Header.Read(br); err != nil {
			var small *fasthttp.ErrSmallBuffer
			if errors.As(err, &small) && br.Size() < maxHeaderBytes {
				br = bufio.NewReaderSize(br, min(16*br.Size(), maxHeaderBytes))
				n--
				continue
			}
			return false, err
		}
		code := resp.StatusCode()
		if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			break
		}
		if n >= 8 {
			return false, errors.New("too many interim (1xx) responses")
		}
	}
	code := resp.StatusCode()
	if code == http.StatusNoContent || code == http.StatusNotModified || code == http.StatusSwitchingProtocols {
		return true, nil
	}
	if err := resp.ReadBody(br, maxBody); err != nil {
		return true, err
	}
	if resp.Header.ContentLength() == -1 {
		if err := resp.Header.ReadTrailer(br); err != nil {
			return true, err
		}
	}
	return true, nil
}

// fastHeader is resp's header as an http.Header, for rules and Retry-After.
func fastHeader(resp *fasthttp.Response) http.Header {
	h := make(http.Header, resp.Header.Len())
	for k, v := range resp.Header.All() {
		h.Add(string(k), string(v))
	}
	return h
}
