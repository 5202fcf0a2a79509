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
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
	"github.com/onceflight/onceflight/schemas"
)

// newService starts the fake external system (apifake.Effects): not
// idempotent; script (nil: none) picks what each POST does around the
// effect, confirm (nil: 200 if applied, 404 if not) what each confirm
// answers.
func newService(t *testing.T, script func(key string, n int) apifake.Fault, confirm func(key string, n int, applied bool) apifake.Fault) *apifake.Effects {
	var opts []apifake.EffectsOption
	if script != nil {
		opts = append(opts, apifake.WithScript(script))
	}
	if confirm != nil {
		opts = append(opts, apifake.WithConfirmScript(confirm))
	}
	return apifake.NewEffects(t, opts...)
}

// connector is an http connector calling s, with its confirm_url if
// confirm.
func connector(t *testing.T, s *apifake.Effects, confirm bool) *httpconn.Connector {
	cfg := httpconn.Config{URL: s.URL("")}
	if confirm {
		cfg.ConfirmURL = s.URL("") + "/{key}"
	}
	c, err := httpconn.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// always answers every POST with f.
func always(f apifake.Fault) func(string, int) apifake.Fault {
	return func(string, int) apifake.Fault { return f }
}

// first answers the first POST with f, the later ones with then.
func first(f, then apifake.Fault) func(string, int) apifake.Fault {
	return func(_ string, n int) apifake.Fault {
		if n == 1 {
			return f
		}
		return then
	}
}

func policy() effect.Policy {
	return effect.Policy{
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

func TestPerform(t *testing.T) {
	type want struct {
		outcome  schemas.Status
		code     string
		attempts int
		effects  int
	}
	for _, tc := range []struct {
		name       string
		script     func(key string, n int) apifake.Fault
		confirm    func(key string, n int, applied bool) apifake.Fault
		noConfirm  bool
		idempotent bool
		want       want
		check      func(t *testing.T, s *apifake.Effects, d effect.Decision)
	}{
		{name: "2xx", want: want{schemas.StatusSucceeded, "", 1, 1},
			check: func(t *testing.T, s *apifake.Effects, d effect.Decision) {
				if string(d.Result) != `{"http_status":201,"body":{"effect_id":"e-refund 1042/é"}}` {
					t.Errorf("result %s", d.Result)
				}
				posts, _, _ := s.Counts(key)
				h := posts[0].Header
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
		{name: "4xx rejected", script: always(apifake.Fault{Before: true, Status: 422, Body: `{"message":"amount exceeds charge"}`}),
			want: want{schemas.StatusFailed, schemas.CodeConnectorRejected, 1, 0},
			check: func(t *testing.T, s *apifake.Effects, d effect.Decision) {
				if d.Message != "HTTP 422: amount exceeds charge" {
					t.Errorf("message %q", d.Message)
				}
			}},
		{name: "503 before applying, then success", script: first(apifake.Fault{Before: true, Status: 503}, apifake.Fault{Status: 200}),
			want: want{schemas.StatusSucceeded, "", 2, 1}},
		// "Not done" uses up no attempt: retried until give_up_after.
		{name: "429 until give_up_after", script: always(apifake.Fault{Before: true, Status: 429, Body: "slow down", ContentType: "text/plain"}),
			want: want{schemas.StatusFailed, schemas.CodeConnectorUnavailable, -1, 0},
			check: func(t *testing.T, s *apifake.Effects, d effect.Decision) {
				if !strings.Contains(d.Message, "last answer: HTTP 429: slow down") || !strings.Contains(d.Message, "waited") {
					t.Errorf("message %q", d.Message)
				}
			}},
		{name: "slow past timeout after applying, confirm 200", script: always(apifake.HangAfterEffect),
			want: want{schemas.StatusSucceeded, "", 1, 1},
			check: func(t *testing.T, s *apifake.Effects, d effect.Decision) {
				if string(d.Result) != `{"http_status":200,"body":{"confirmed":true,"key":"refund 1042/é","effect_id":"e-refund 1042/é"}}` {
					t.Errorf("result %s", d.Result)
				}
			}},
		{name: "500 after applying, confirm 200", script: always(apifake.Fault{Status: 500}), want: want{schemas.StatusSucceeded, "", 1, 1}},
		{name: "500 before applying, confirm 404, executed again", script: first(apifake.FailBeforeEffect, apifake.None),
			want: want{schemas.StatusSucceeded, "", 2, 1}},
		{name: "connection closed mid-response after applying", script: always(apifake.Fault{Cut: true}),
			want: want{schemas.StatusSucceeded, "", 1, 1}},
		{name: "confirm flaps 500 then 200", script: always(apifake.Fault{Status: 502}),
			confirm: func(_ string, n int, applied bool) apifake.Fault {
				if n == 1 || !applied {
					return apifake.Fault{Status: 500}
				}
				return apifake.None
			}, want: want{schemas.StatusSucceeded, "", 1, 1}},
		{name: "no confirm_url, not idempotent", noConfirm: true, script: always(apifake.Fault{Status: 504}),
			want: want{schemas.StatusUnresolved, schemas.CodeAmbiguous, 1, 1}},
		{name: "no confirm_url, idempotent by key", noConfirm: true, idempotent: true,
			script: first(apifake.Fault{Status: 500}, apifake.Fault{Dedupe: true}),
			want:   want{schemas.StatusSucceeded, "", 2, 1}},
		{name: "confirm never answers", script: always(apifake.Fault{Status: 500}),
			confirm: func(string, int, bool) apifake.Fault { return apifake.Fault{Hang: true} },
			want:    want{schemas.StatusUnresolved, schemas.CodeConfirmationTimeout, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newService(t, tc.script, tc.confirm)
			p := policy()
			p.IdempotentByKey = tc.idempotent
			p.GiveUpAfter = 300 * time.Millisecond
			d := effect.Perform(context.Background(), connector(t, s, !tc.noConfirm), request(), p)
			got := want{d.Outcome, d.Code, d.Attempts, s.Effects(key)}
			if tc.want.attempts < 0 && got.attempts > 2 {
				got.attempts = -1 // several: how many fit is the scheduler's
			}
			if got != tc.want {
				t.Fatalf("got %+v (message %q), want %+v", got, d.Message, tc.want)
			}
			if s.Posts() != d.Attempts {
				t.Errorf("server saw %d POSTs for %d attempts", s.Posts(), d.Attempts)
			}
			if tc.check != nil {
				tc.check(t, s, d)
			}
		})
	}
}

func TestDeadlinePassedSendsNothing(t *testing.T) {
	s := newService(t, nil, nil)
	req := request()
	req.Deadline = time.Now().Add(-time.Millisecond)
	res := connector(t, s, true).Execute(context.Background(), req)
	if res.Kind != connectors.Unavailable || res.Message != httpconn.ErrDeadlinePassed.Error() {
		t.Fatalf("result %v %q", res.Kind, res.Message)
	}
	if s.Posts() != 0 {
		t.Fatalf("%d requests reached the server", s.Posts())
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
		s := newService(t, always(apifake.Fault{Before: true, Status: tc.code, RetryAfter: tc.header}), nil)
		res := connector(t, s, true).Execute(context.Background(), request())
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
	s := newService(t, always(apifake.Fault{Before: true, Status: 200, Body: strings.Repeat("x", 100), ContentType: "text/plain"}), nil)
	c, err := httpconn.New(httpconn.Config{URL: s.URL(""), MaxResultBytes: 10})
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
		s := newService(t, func(key string, _ int) apifake.Fault {
			if _, ok := ambiguous.LoadAndDelete(key); ok {
				return apifake.Fault{Status: 504}
			}
			return apifake.Fault{Status: 200, Body: `{"ok":true}`}
		}, nil)
		return connectortest.Harness{
			Conn:               connector(t, s, true),
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
	// "." and "..", also between slashes ("../x"), are not asked at all
	// (TestDotSegmentValueRefused).
	for _, tc := range []struct{ key, raw string }{
		{"...", "/refunds/%2E%2E%2E/status"},
		{"a.b", "/refunds/a.b/status"},
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
