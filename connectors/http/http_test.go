package httpconn_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/connectors/connectortest"
	httpconn "github.com/onceflight/onceflight/connectors/http"
)

// service is a refund API that is not idempotent (unless told): every POST
// that reaches apply adds an effect. behave decides, per call number, what
// happens around the effect.
type service struct {
	t          *testing.T
	srv        *httptest.Server
	idempotent bool
	behave     func(n int, w http.ResponseWriter, r *http.Request, apply func()) // nil: apply, 201
	confirm    func(n int, w http.ResponseWriter, key string, found bool)        // nil: 200 / 404

	mu       sync.Mutex
	effects  map[string]int
	posts    atomic.Int64
	confirms atomic.Int64
	headers  http.Header
}

func newService(t *testing.T, s *service) *service {
	s.t, s.effects = t, map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /refunds", func(w http.ResponseWriter, r *http.Request) {
		n := int(s.posts.Add(1))
		s.mu.Lock()
		s.headers = r.Header.Clone()
		s.mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		apply := func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.idempotent || s.effects[key] == 0 {
				s.effects[key]++
			}
		}
		if s.behave != nil {
			s.behave(n, w, r, apply)
			return
		}
		apply()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"refund_id": "re_77"}`))
	})
	mux.HandleFunc("GET /refunds/{key}", func(w http.ResponseWriter, r *http.Request) {
		n := int(s.confirms.Add(1))
		key := r.PathValue("key")
		found := s.Effects(key) > 0
		if s.confirm != nil {
			s.confirm(n, w, key, found)
			return
		}
		if !found {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"refund_id":"re_77"}`))
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *service) Effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[key]
}

func (s *service) connector(t *testing.T, confirm bool) *httpconn.Connector {
	cfg := httpconn.Config{URL: s.srv.URL + "/refunds"}
	if confirm {
		cfg.ConfirmURL = s.srv.URL + "/refunds/{key}"
	}
	c, err := httpconn.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func policy() connectors.Policy {
	return connectors.Policy{
		Timeout:        100 * time.Millisecond,
		MaxAttempts:    3,
		ConfirmTimeout: 400 * time.Millisecond,
		Backoff:        func() backoff.BackOff { return backoff.NewConstantBackOff(5 * time.Millisecond) },
	}
}

const key = "refund 1042/é"

func request() connectors.Request {
	return connectors.Request{Action: "payments.refund", Entity: "order-1042", Key: key, Attempt: 1,
		FencingToken: 17, Data: json.RawMessage(`{"amount":5}`), TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
}

func status(code int, body string) func(int, http.ResponseWriter, *http.Request, func()) {
	return func(_ int, w http.ResponseWriter, _ *http.Request, _ func()) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func TestPerform(t *testing.T) {
	type want struct {
		outcome  connectors.Outcome
		code     string
		attempts int
		effects  int
	}
	for _, tc := range []struct {
		name       string
		svc        *service
		noConfirm  bool
		idempotent bool
		want       want
		check      func(t *testing.T, s *service, d connectors.Decision)
	}{
		{name: "2xx", want: want{connectors.OutcomeSucceeded, "", 1, 1},
			check: func(t *testing.T, s *service, d connectors.Decision) {
				if string(d.Result) != `{"http_status":201,"body":{"refund_id":"re_77"}}` {
					t.Errorf("result %s", d.Result)
				}
				h := s.headers
				for k, v := range map[string]string{"Content-Type": "application/json", "Idempotency-Key": key, "Onceflight-Entity": "order-1042",
					"Onceflight-Action": "payments.refund", "Onceflight-Attempt": "1", "Onceflight-Fencing-Token": "17",
					"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
					if h.Get(k) != v {
						t.Errorf("header %s = %q, want %q", k, h.Get(k), v)
					}
				}
				if _, err := time.Parse(time.RFC3339, h.Get("Onceflight-Deadline")); err != nil {
					t.Errorf("Onceflight-Deadline: %v", err)
				}
			}},
		{name: "4xx rejected", svc: &service{behave: status(422, `{"message":"amount exceeds charge"}`)},
			want: want{connectors.OutcomeFailed, connectors.CodeRejected, 1, 0},
			check: func(t *testing.T, s *service, d connectors.Decision) {
				if d.Message != "HTTP 422: amount exceeds charge" {
					t.Errorf("message %q", d.Message)
				}
			}},
		{name: "503 before applying, then success", svc: &service{behave: func(n int, w http.ResponseWriter, _ *http.Request, apply func()) {
			if n == 1 {
				w.WriteHeader(503)
				return
			}
			apply()
			w.WriteHeader(200)
		}}, want: want{connectors.OutcomeSucceeded, "", 2, 1}},
		// "Not done" uses up no attempt: retried until give_up_after.
		{name: "429 until give_up_after", svc: &service{behave: status(429, "slow down")}, want: want{connectors.OutcomeFailed, connectors.CodeUnavailable, -1, 0},
			check: func(t *testing.T, s *service, d connectors.Decision) {
				if !strings.Contains(d.Message, "last answer: HTTP 429: slow down") || !strings.Contains(d.Message, "waited") {
					t.Errorf("message %q", d.Message)
				}
			}},
		{name: "slow past timeout after applying, confirm 200", svc: &service{behave: func(_ int, w http.ResponseWriter, r *http.Request, apply func()) {
			apply()
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
			w.WriteHeader(200)
		}}, want: want{connectors.OutcomeSucceeded, "", 1, 1},
			check: func(t *testing.T, s *service, d connectors.Decision) {
				if string(d.Result) != `{"http_status":200,"body":{"refund_id":"re_77"}}` {
					t.Errorf("result %s", d.Result)
				}
			}},
		{name: "500 after applying, confirm 200", svc: &service{behave: func(_ int, w http.ResponseWriter, _ *http.Request, apply func()) {
			apply()
			w.WriteHeader(500)
		}}, want: want{connectors.OutcomeSucceeded, "", 1, 1}},
		{name: "500 before applying, confirm 404, executed again", svc: &service{behave: func(n int, w http.ResponseWriter, _ *http.Request, apply func()) {
			if n == 1 {
				w.WriteHeader(500)
				return
			}
			apply()
			w.WriteHeader(201)
		}}, want: want{connectors.OutcomeSucceeded, "", 2, 1}},
		{name: "connection closed mid-response after applying", svc: &service{behave: func(_ int, w http.ResponseWriter, _ *http.Request, apply func()) {
			apply()
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"refund")
			_ = buf.Flush()
			_ = conn.Close()
		}}, want: want{connectors.OutcomeSucceeded, "", 1, 1}},
		{name: "confirm flaps 500 then 200", svc: &service{
			behave: func(_ int, w http.ResponseWriter, _ *http.Request, apply func()) { apply(); w.WriteHeader(502) },
			confirm: func(n int, w http.ResponseWriter, _ string, found bool) {
				if n == 1 || !found {
					w.WriteHeader(500)
					return
				}
				_, _ = w.Write([]byte(`{"refund_id":"re_77"}`))
			}}, want: want{connectors.OutcomeSucceeded, "", 1, 1}},
		{name: "no confirm_url, not idempotent", noConfirm: true, svc: &service{behave: func(_ int, w http.ResponseWriter, _ *http.Request, apply func()) {
			apply()
			w.WriteHeader(504)
		}}, want: want{connectors.OutcomeUnresolved, connectors.CodeAmbiguousNoConfirm, 1, 1}},
		{name: "no confirm_url, idempotent by key", noConfirm: true, idempotent: true, svc: &service{idempotent: true,
			behave: func(n int, w http.ResponseWriter, _ *http.Request, apply func()) {
				apply()
				if n == 1 {
					w.WriteHeader(500)
					return
				}
				w.WriteHeader(200)
			}}, want: want{connectors.OutcomeSucceeded, "", 2, 1}},
		{name: "confirm never answers", svc: &service{
			behave:  func(_ int, w http.ResponseWriter, _ *http.Request, apply func()) { apply(); w.WriteHeader(500) },
			confirm: func(int, http.ResponseWriter, string, bool) { time.Sleep(150 * time.Millisecond) },
		}, want: want{connectors.OutcomeUnresolved, connectors.CodeConfirmationTimeout, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.svc == nil {
				tc.svc = &service{}
			}
			s := newService(t, tc.svc)
			p := policy()
			p.IdempotentByKey = tc.idempotent
			p.GiveUpAfter = 300 * time.Millisecond
			d := connectors.Perform(context.Background(), s.connector(t, !tc.noConfirm), request(), p)
			got := want{d.Outcome, d.Code, d.Attempts, s.Effects(key)}
			if tc.want.attempts < 0 && got.attempts > 2 {
				got.attempts = -1 // several: how many fit is the scheduler's
			}
			if got != tc.want {
				t.Fatalf("got %+v (message %q), want %+v", got, d.Message, tc.want)
			}
			if int(s.posts.Load()) != d.Attempts {
				t.Errorf("server saw %d POSTs for %d attempts", s.posts.Load(), d.Attempts)
			}
			if tc.check != nil {
				tc.check(t, s, d)
			}
		})
	}
}

func TestDeadlinePassedSendsNothing(t *testing.T) {
	s := newService(t, &service{})
	req := request()
	req.Deadline = time.Now().Add(-time.Millisecond)
	res := s.connector(t, true).Execute(context.Background(), req)
	if res.Kind != connectors.Unavailable || res.Message != httpconn.ErrDeadlinePassed.Error() {
		t.Fatalf("result %v %q", res.Kind, res.Message)
	}
	if s.posts.Load() != 0 {
		t.Fatalf("%d requests reached the server", s.posts.Load())
	}
}

func TestConnectionRefusedIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	c, err := httpconn.New(httpconn.Config{URL: u + "/refunds"})
	if err != nil {
		t.Fatal(err)
	}
	req := request()
	req.Deadline = time.Now().Add(time.Second)
	if res := c.Execute(context.Background(), req); res.Kind != connectors.Unavailable || res.Signal != connectors.SignalDown {
		t.Fatalf("result %v %v %q", res.Kind, res.Signal, res.Message)
	}
}

// 429 and 503 carry the system's wish (Retry-After) and what they say
// about the system (busy, down); 408 neither.
func TestRetryAfterAndSignal(t *testing.T) {
	for _, tc := range []struct {
		code   int
		header string
		signal connectors.Signal
		after  time.Duration
	}{
		{429, "2", connectors.SignalBusy, 2 * time.Second},
		{503, "1", connectors.SignalDown, time.Second},
		{429, "", connectors.SignalBusy, 0},
		{408, "5", connectors.SignalNone, 0},
	} {
		s := newService(t, &service{behave: func(_ int, w http.ResponseWriter, _ *http.Request, _ func()) {
			if tc.header != "" {
				w.Header().Set("Retry-After", tc.header)
			}
			w.WriteHeader(tc.code)
		}})
		res := s.connector(t, true).Execute(context.Background(), request())
		if res.Kind != connectors.Unavailable || res.Signal != tc.signal || res.RetryAfter != tc.after {
			t.Errorf("HTTP %d Retry-After %q: %v %v %s (%q)", tc.code, tc.header, res.Kind, res.Signal, res.RetryAfter, res.Message)
		}
	}
}

func TestRetryAfterValues(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"1": time.Second, " 120 ": 2 * time.Minute, "0": 0, "-3": 0, "soon": 0, "": 0, "1.5": 0,
		"Wed, 02 Dec 2026 10:00:30 GMT": 30 * time.Second,
		"Wed, 02 Dec 2026 09:59:00 GMT": 0, // past
		"99999999":                      24 * time.Hour,
	} {
		if got := httpconn.RetryAfter(v, now); got != want {
			t.Errorf("RetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestResultTruncatedAndText(t *testing.T) {
	s := newService(t, &service{behave: status(200, strings.Repeat("x", 100))})
	c, err := httpconn.New(httpconn.Config{URL: s.srv.URL + "/refunds", MaxResultBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Execute(context.Background(), request())
	if res.Kind != connectors.Succeeded || string(res.Result) != `{"http_status":200,"body":"xxxxxxxxxx","body_truncated":true}` {
		t.Fatalf("result %v %s", res.Kind, res.Result)
	}
}

func TestConformance(t *testing.T) {
	connectortest.Run(t, connectortest.Features{Confirm: true}, func(t *testing.T) connectortest.Harness {
		var ambiguous sync.Map
		s := &service{}
		s.behave = func(_ int, w http.ResponseWriter, r *http.Request, apply func()) {
			apply()
			if _, ok := ambiguous.LoadAndDelete(r.Header.Get("Idempotency-Key")); ok {
				w.WriteHeader(504)
				return
			}
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
		newService(t, s)
		return connectortest.Harness{
			Conn:               s.connector(t, true),
			Effects:            s.Effects,
			ApplyThenAmbiguous: func(key string) { ambiguous.Store(key, true) },
		}
	})
}

// After a timeout the connection is not used again: the next request
// arrives on a new connection (docs/connectors.md; a half-read response must never be
// taken as the next request's answer).
func TestTimedOutConnectionNotReused(t *testing.T) {
	var conns atomic.Int32
	slow := atomic.Bool{}
	slow.Store(true)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			time.Sleep(300 * time.Millisecond)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := httpconn.New(httpconn.Config{URL: srv.URL + "/refunds", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req := request()
	req.Deadline = time.Now().Add(time.Second)
	if res := c.Execute(context.Background(), req); res.Kind != connectors.Ambiguous {
		t.Fatalf("slow answer: %v %q, want ambiguous", res.Kind, res.Message)
	}
	slow.Store(false)
	req.Deadline = time.Now().Add(time.Second)
	if res := c.Execute(context.Background(), req); res.Kind != connectors.Succeeded {
		t.Fatalf("second: %v %q", res.Kind, res.Message)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (no reuse after the timeout)", n)
	}
}

// Issue 7: a key "." or ".." replacing {key} must not form a dot-segment,
// which a client, proxy or server may remove (GET /refunds/.. is the
// collection's parent). The raw request path is checked, on a handler that
// does no path cleaning of its own.
func TestConfirmKeyIsNeverADotSegment(t *testing.T) {
	var mu sync.Mutex
	var raw, decoded string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		raw, decoded = r.RequestURI, r.URL.Path
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	c, err := httpconn.New(httpconn.Config{URL: srv.URL + "/refunds", ConfirmURL: srv.URL + "/refunds/{key}/status"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, raw string }{
		{".", "/refunds/%2E/status"},
		{"..", "/refunds/%2E%2E/status"},
		{"...", "/refunds/%2E%2E%2E/status"},
		{"a.b", "/refunds/a.b/status"},
		{"../x", "/refunds/..%2Fx/status"},
		{"refund 1042/é", "/refunds/refund%201042%2F%C3%A9/status"},
	} {
		req := request()
		req.Key = tc.key
		if r := c.Confirm(context.Background(), req); r.Kind != connectors.NotFound {
			t.Fatalf("key %q: confirm = %v %s", tc.key, r.Kind, r.Message)
		}
		mu.Lock()
		gotRaw, gotPath := raw, decoded
		mu.Unlock()
		if gotRaw != tc.raw {
			t.Errorf("key %q: request path %q, want %q", tc.key, gotRaw, tc.raw)
		}
		if want := "/refunds/" + tc.key + "/status"; gotPath != want {
			t.Errorf("key %q: decoded path %q, want %q", tc.key, gotPath, want)
		}
	}
}
