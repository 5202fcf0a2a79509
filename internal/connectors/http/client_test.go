package httpconn_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
)

// testClientEnv names the client the package's tests run on when set;
// unset, they run on the default (fasthttp) and TestSuiteOnNetHTTP runs
// them all again on net/http.
const testClientEnv = "HTTPCONN_TEST_CLIENT"

func TestMain(m *testing.M) {
	if c := os.Getenv(testClientEnv); c != "" {
		httpconn.SetDefaultClient(c)
	}
	os.Exit(m.Run())
}

// TestSuiteOnNetHTTP runs every test of the package with net/http as the
// default client: each behaviour docs/connectors.md states holds on both.
func TestSuiteOnNetHTTP(t *testing.T) {
	if os.Getenv(testClientEnv) != "" {
		t.Skip("already the suite on one client")
	}
	args := []string{"-test.run=^Test", "-test.skip=^TestSuiteOnNetHTTP$", "-test.count=1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), testClientEnv+"="+httpconn.ClientNetHTTP)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite on %s: %v\n%s", httpconn.ClientNetHTTP, err, out)
	}
}

// newTestConnector is a connector for url with cfg's other settings.
func newTestConnector(t *testing.T, cfg httpconn.Config) *httpconn.Connector {
	t.Helper()
	c, err := httpconn.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func deadlined() connectors.Request {
	r := request()
	r.Deadline = time.Now().Add(5 * time.Second)
	return r
}

// A kept-alive connection that the server closes after reading a POST,
// without answering: the POST may have been done, so the answer is
// ambiguous and the request is not sent again by the client. fasthttp's
// HostClient.Do sends a request again in this case when its RetryIf or
// RetryIfErr allows (by default for GET, HEAD, PUT: an API's method may be
// PUT); the connector does not use Do.
func TestClosedKeptAliveConnectionIsNotResent(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if posts.Add(1) == 2 {
			hangUp(w, "")
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	c := newTestConnector(t, httpconn.Config{URL: srv.URL + "/refunds"})
	if res := c.Execute(context.Background(), deadlined()); res.Kind != connectors.Succeeded {
		t.Fatalf("first: %v %q", res.Kind, res.Message)
	}
	if res := c.Execute(context.Background(), deadlined()); res.Kind != connectors.Ambiguous {
		t.Fatalf("connection closed after the request: %v %q, want ambiguous", res.Kind, res.Message)
	}
	if n := posts.Load(); n != 2 {
		t.Fatalf("the server saw %d POSTs, want 2: the client resent one", n)
	}
}

// hangUp writes raw (nothing when "") on w's connection and closes it: an
// answer that breaks off, or none at all after the request was read.
func hangUp(w http.ResponseWriter, raw string) {
	conn, bw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	fmt.Fprint(bw, raw)
	_ = bw.Flush()
	_ = conn.Close()
}

// A 2xx whose body breaks off stays succeeded: the status says it
// happened.
func TestBrokenBodyAfterStatusSucceeds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hangUp(w, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":")
	}))
	defer srv.Close()
	c := newTestConnector(t, httpconn.Config{URL: srv.URL + "/refunds"})
	if res := c.Execute(context.Background(), deadlined()); res.Kind != connectors.Succeeded {
		t.Fatalf("201 with a broken body: %v %q, want succeeded", res.Kind, res.Message)
	}
}

// heldServer is a system that holds every POST it counts until release
// (or the test's end), then answers 201: a request to its url is sent and
// unanswered for as long as the test looks. It is released before it is
// closed, so the requests' goroutines end.
func heldServer(t *testing.T) (url string, posts *atomic.Int32, release func()) {
	t.Helper()
	held := make(chan struct{})
	release = sync.OnceFunc(func() { close(held) })
	posts = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		posts.Add(1)
		<-held
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(release)
	return srv.URL + "/refunds", posts, release
}

// A request whose deadline passes while it waits for one of max_conns
// busy connections was not sent: unavailable, and the server never sees it.
func TestDeadlineWhileWaitingForConnectionIsNotSent(t *testing.T) {
	url, posts, release := heldServer(t)
	c := newTestConnector(t, httpconn.Config{URL: url, Transport: httpconn.Transport{MaxConns: 1}})
	first := make(chan connectors.Result, 1)
	go func() { first <- c.Execute(context.Background(), deadlined()) }()
	t.Cleanup(func() { release(); <-first })
	for posts.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	req := request()
	req.Deadline = time.Now().Add(50 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), req.Deadline)
	defer cancel()
	if res := c.Execute(ctx, req); res.Kind != connectors.Unavailable {
		t.Fatalf("waited past its deadline for a connection: %v %q, want unavailable", res.Kind, res.Message)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the server saw %d POSTs, want 1", n)
	}
}

// Cancelling the context (a shutdown) ends a request that has no deadline
// and waits for its answer: ambiguous, since it was sent.
func TestCancelEndsASentRequest(t *testing.T) {
	url, posts, _ := heldServer(t)
	c := newTestConnector(t, httpconn.Config{URL: url})
	ctx, cancel := context.WithCancel(context.Background())
	cancelWhenSent(t, c, ctx, request(), posts, cancel)
}

// cancelWhenSent executes r under ctx, calls cancel once the server has
// the request, and wants Execute to return ambiguous, cancelled.
func cancelWhenSent(t *testing.T, c *httpconn.Connector, ctx context.Context, r connectors.Request, posts *atomic.Int32, cancel func()) {
	t.Helper()
	done := make(chan connectors.Result, 1)
	go func() { done <- c.Execute(ctx, r) }()
	for posts.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case res := <-done:
		if res.Kind != connectors.Ambiguous || !strings.Contains(res.Message, "canceled") {
			t.Fatalf("cancelled after sending: %v %q, want ambiguous", res.Kind, res.Message)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Execute did not return after its context was cancelled")
	}
}

// attemptCtx is a context like Perform's attempt context (package effect):
// its Done is its deadline's (made, with a timer, when asked for), and it
// names parent as its Cancellation. asked records a call of Done.
type attemptCtx struct {
	context.Context
	parent context.Context
	asked  atomic.Bool
}

func (c *attemptCtx) Done() <-chan struct{} {
	c.asked.Store(true)
	return c.Context.Done()
}

func (c *attemptCtx) Cancellation() context.Context { return c.parent }

// A sent request under an attempt context ends when the context it names
// as its Cancellation is cancelled (a shutdown), ambiguous; fasthttp waits
// on that context alone, without asking the attempt's own for Done (which
// would make its deadline's context and timer), the deadline being the
// connection's already.
func TestCancellationEndsASentRequest(t *testing.T) {
	url, posts, _ := heldServer(t)
	c := newTestConnector(t, httpconn.Config{URL: url})
	parent, cancel := context.WithCancel(context.Background())
	req := deadlined()
	dctx, stop := context.WithDeadline(parent, req.Deadline)
	defer stop()
	ctx := &attemptCtx{Context: dctx, parent: parent}
	cancelWhenSent(t, c, ctx, req, posts, cancel)
	if fast := os.Getenv(testClientEnv) != httpconn.ClientNetHTTP; fast && ctx.asked.Load() {
		t.Error("fasthttp asked the attempt context for Done: its deadline's timer was made")
	}
}

// A shape that adds no header of its own has its protocol headers written
// without an http.Header (sendFast): the request carries the same header
// lines as one whose shape adds a header, less that header, on either
// client.
func TestPlainShapeSendsTheSameHeaders(t *testing.T) {
	got := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	r := deadlined()
	var seen [2]http.Header
	for i, api := range []httpconn.API{{}, {Headers: map[string]string{"X-Tenant": "t-7"}}} {
		c := newTestConnector(t, httpconn.Config{URL: srv.URL + "/refunds", API: api})
		if res := c.Execute(context.Background(), r); res.Kind != connectors.Succeeded {
			t.Fatalf("shape %d: %v %q", i, res.Kind, res.Message)
		}
		seen[i] = <-got
	}
	if v := seen[1].Get("X-Tenant"); v != "t-7" {
		t.Fatalf("configured header X-Tenant = %q", v)
	}
	seen[1].Del("X-Tenant")
	if fmt.Sprint(seen[0]) != fmt.Sprint(seen[1]) {
		t.Fatalf("plain shape's header\n%v\nthe header map's\n%v", seen[0], seen[1])
	}
	if ua := seen[0].Get("User-Agent"); ua != "Go-http-client/1.1" {
		t.Fatalf("User-Agent %q", ua)
	}
}

// systems.<name>.http.client: a name it does not know, and fasthttp where
// it cannot apply, are refused.
func TestClientSetting(t *testing.T) {
	for _, tc := range []struct {
		cfg  httpconn.Config
		want string
	}{
		{httpconn.Config{URL: "http://h/x", Transport: httpconn.Transport{Client: "curl"}}, `client "curl"`},
		{httpconn.Config{URL: "http://h/x", Client: &http.Client{}, Transport: httpconn.Transport{Client: httpconn.ClientFast}}, "Config.Client is set"},
	} {
		if _, err := httpconn.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg.Transport, err, tc.want)
		}
	}
	for _, name := range []string{"", httpconn.ClientFast, httpconn.ClientNetHTTP} {
		if _, err := httpconn.New(httpconn.Config{URL: "https://h/x", Transport: httpconn.Transport{Client: name}}); err != nil {
			t.Errorf("client %q: %v", name, err)
		}
	}
}

// A 2xx whose body is far longer than the result keeps is succeeded, and
// the result says the body was cut.
func TestHugeBodyIsCut(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, big)
	}))
	defer srv.Close()
	c := newTestConnector(t, httpconn.Config{URL: srv.URL + "/refunds", MaxResultBytes: 1 << 10})
	res := c.Execute(context.Background(), deadlined())
	if res.Kind != connectors.Succeeded || !strings.Contains(string(res.Result), `"body_truncated":true`) {
		t.Fatalf("201 with a 200 KiB body: %v %q %.80s", res.Kind, res.Message, res.Result)
	}
}

// A kept-alive connection the system closed while it was idle (its own
// idle timeout shorter than the connector's) is not used for the next
// request: that request is sent on a new connection and answered, not
// written into the closed one and ambiguous. net/http learns of the close
// from its reading goroutine; the fasthttp path looks before writing.
func TestIdleConnectionClosedBySystemIsNotUsed(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", useTLS), func(t *testing.T) {
			var posts, closed atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				posts.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			srv.Config.IdleTimeout = 20 * time.Millisecond
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateClosed {
					closed.Add(1)
				}
			}
			cfg := httpconn.Config{}
			if useTLS {
				srv.StartTLS()
				ca := filepath.Join(t.TempDir(), "ca.pem")
				writePEM(t, ca, "CERTIFICATE", srv.Certificate().Raw)
				cfg.API.TLS = httpconn.TLS{CAFile: ca, ServerName: "example.com"}
			} else {
				srv.Start()
			}
			defer srv.Close()
			cfg.URL = srv.URL + "/refunds"
			c := newTestConnector(t, cfg)
			if res := c.Execute(context.Background(), deadlined()); res.Kind != connectors.Succeeded {
				t.Fatalf("first: %v %q", res.Kind, res.Message)
			}
			for closed.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(10 * time.Millisecond) // the FIN reaches the client's socket
			if res := c.Execute(context.Background(), deadlined()); res.Kind != connectors.Succeeded {
				t.Fatalf("after the system closed the idle connection: %v %q, want succeeded", res.Kind, res.Message)
			}
			if n := posts.Load(); n != 2 {
				t.Fatalf("the server saw %d POSTs, want 2", n)
			}
		})
	}
}

// The same as TestClosedKeptAliveConnectionIsNotResent with an empty
// body (a form body of data with no field, a template that expands to
// nothing, a GET): net/http counts a request with no body and an
// Idempotency-Key header (or a GET) as replayable and sends it again by
// itself when a reused connection closes before the answer. The POST may
// have been done: the answer is ambiguous, and the server sees it once.
func TestClosedKeptAliveConnectionIsNotResentEmptyBody(t *testing.T) {
	for _, tc := range []struct {
		name, client string
		api          httpconn.API
	}{
		{"form, fasthttp", httpconn.ClientFast, httpconn.API{Body: httpconn.BodyForm}},
		{"form, net/http", httpconn.ClientNetHTTP, httpconn.API{Body: httpconn.BodyForm}},
		{"template, net/http", httpconn.ClientNetHTTP, httpconn.API{Body: httpconn.BodyTemplate, BodyTemplate: "{data.note}", ContentType: "text/plain"}},
		{"GET, net/http", httpconn.ClientNetHTTP, httpconn.API{Method: http.MethodGet, Body: httpconn.BodyForm}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			lengths := make(chan string, 4)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				lengths <- fmt.Sprintf("%d %v", r.ContentLength, r.TransferEncoding)
				if calls.Add(1) == 2 {
					hangUp(w, "")
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			defer srv.Close()
			c := newTestConnector(t, httpconn.Config{URL: srv.URL + "/refunds", API: tc.api, Transport: httpconn.Transport{Client: tc.client}})
			r := deadlined()
			r.Data = []byte(`{"note":""}`)
			if tc.api.Body == httpconn.BodyForm {
				r.Data = []byte(`{}`)
			}
			if res := c.Execute(context.Background(), r); res.Kind != connectors.Succeeded {
				t.Fatalf("first: %v %q", res.Kind, res.Message)
			}
			if got := <-lengths; got != "0 []" {
				t.Fatalf("the empty body went as length, transfer-encoding %q, want \"0 []\"", got)
			}
			if res := c.Execute(context.Background(), r); res.Kind != connectors.Ambiguous {
				t.Fatalf("connection closed after the request: %v %q, want ambiguous", res.Kind, res.Message)
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("the server saw %d requests, want 2: the client resent one", n)
			}
		})
	}
}

// An answer whose header is longer than a read buffer (a long Link or
// Content-Security-Policy, many cookies) is classified by its status like
// any other, on either client: net/http reads headers up to 10 MB, and
// the fast path must not turn a 201 or a 422 into "sent, no response".
func TestLongAnswerHeaderIsAnAnswer(t *testing.T) {
	long := strings.Repeat("x", 20<<10)
	for _, tc := range []struct {
		status int
		want   connectors.Kind
	}{
		{http.StatusCreated, connectors.Succeeded},
		{http.StatusUnprocessableEntity, connectors.Rejected},
		{http.StatusTooManyRequests, connectors.Unavailable},
	} {
		for _, client := range []string{httpconn.ClientFast, httpconn.ClientNetHTTP} {
			t.Run(fmt.Sprintf("%d %s", tc.status, client), func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("X-Long", long)
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(tc.status)
					fmt.Fprint(w, `{"message":"long header"}`)
				}))
				defer srv.Close()
				c := newTestConnector(t, httpconn.Config{URL: srv.URL + "/refunds", Transport: httpconn.Transport{Client: client}})
				for i := range 2 { // the second on the kept connection
					res := c.Execute(context.Background(), deadlined())
					if res.Kind != tc.want {
						t.Fatalf("request %d: HTTP %d with a 20 KiB header: %v %q, want %v", i+1, tc.status, res.Kind, res.Message, tc.want)
					}
					if tc.status == http.StatusCreated && !strings.Contains(string(res.Result), `"long header"`) {
						t.Fatalf("request %d: result %s", i+1, res.Result)
					}
				}
			})
		}
	}
}

// A system that takes the TCP connection and never answers the TLS
// handshake: the attempt's deadline bounds connecting, the handshake
// included (tls_handshake_timeout is a bound of its own, not a licence to
// outlast the attempt), and nothing was sent: unavailable.
func TestDeadlineBoundsTheTLSHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never a byte of the handshake
			mu.Unlock()
		}
	}()
	for _, client := range []string{httpconn.ClientFast, httpconn.ClientNetHTTP} {
		t.Run(client, func(t *testing.T) {
			c := newTestConnector(t, httpconn.Config{URL: "https://" + ln.Addr().String() + "/refunds",
				Transport: httpconn.Transport{Client: client, TLSHandshakeTimeout: time.Hour}})
			r := request()
			r.Deadline = time.Now().Add(100 * time.Millisecond)
			done := make(chan connectors.Result, 1)
			go func() { done <- c.Execute(context.Background(), r) }()
			select {
			case res := <-done:
				if res.Kind != connectors.Unavailable {
					t.Fatalf("handshake never answered: %v %q, want unavailable", res.Kind, res.Message)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Execute outlasted its deadline: the TLS handshake is bounded by tls_handshake_timeout (1h) alone")
			}
		})
	}
}
