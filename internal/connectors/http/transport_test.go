package httpconn_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
	"github.com/onceflight/onceflight/schemas"
)

// connServer counts the connections it accepted and the most open at once.
type connServer struct {
	*httptest.Server
	accepted, open, peak atomic.Int64
}

// processCPU is user+system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func newConnServer(t *testing.T, h http.HandlerFunc) *connServer {
	s := &connServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
			n := s.open.Add(1)
			for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// run sends n requests, conc at a time, and fails on any that did not
// succeed.
func run(t *testing.T, c *httpconn.Connector, n, conc int) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	var failed atomic.Value
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if res := c.Execute(context.Background(), req(fmt.Sprintf("k%d", i), `{}`)); res.Kind != connectors.Succeeded {
				failed.Store(res)
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatalf("a request failed: %+v", f)
	}
}

// max_conns caps the connections to the system whatever the requests in
// flight: 32 at once through a cap of 4 never open a fifth.
func TestTransportMaxConns(t *testing.T) {
	srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond)
		fmt.Fprint(w, `{}`)
	})
	c, err := httpconn.New(httpconn.Config{URL: srv.URL + "/x", Timeout: 10 * time.Second, MaxConcurrent: 32,
		Transport: httpconn.Transport{MaxConns: 4}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c, 200, 32)
	if p := srv.peak.Load(); p > 4 {
		t.Errorf("%d connections open at once with max_conns 4", p)
	}
}

// By default the idle connections kept match the requests in flight, so
// rounds of 64 concurrent requests reuse the first round's connections;
// with net/http's default of 2 idle per host, almost every request of a
// round opened a connection. With max_idle_conns 1 that happens again:
// the setting is what makes the difference.
func TestTransportKeepsIdleConnsForTheCeiling(t *testing.T) {
	const conc, rounds = 64, 5
	handler := func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Millisecond)
		fmt.Fprint(w, `{}`)
	}
	accepted := func(tr httpconn.Transport) int64 {
		srv := newConnServer(t, handler)
		c, err := httpconn.New(httpconn.Config{URL: srv.URL + "/x", Timeout: 10 * time.Second, MaxConcurrent: conc, Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		for range rounds {
			run(t, c, conc, conc)
		}
		return srv.accepted.Load()
	}
	def, one := accepted(httpconn.Transport{}), accepted(httpconn.Transport{MaxIdleConns: 1})
	t.Logf("connections for %d rounds of %d: %d by default, %d with max_idle_conns 1", rounds, conc, def, one)
	// A connection may be handed back a moment after its request
	// returned, so a later round can open a few more than the first; far
	// from one per request either way.
	if def > 2*conc {
		t.Errorf("%d connections for %d rounds of %d requests: idle connections were not reused", def, rounds, conc)
	}
	if one < 3*conc {
		t.Errorf("only %d connections with max_idle_conns 1: the setting was not applied", one)
	}
}

// idle_timeout closes a connection left idle longer, so the next request
// dials again.
func TestTransportIdleTimeout(t *testing.T) {
	srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{}`) })
	c, err := httpconn.New(httpconn.Config{URL: srv.URL + "/x", Timeout: 10 * time.Second,
		Transport: httpconn.Transport{IdleTimeout: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c, 1, 1)
	deadline := time.Now().Add(10 * time.Second)
	for srv.open.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if srv.open.Load() != 0 {
		t.Fatal("the idle connection was not closed after idle_timeout")
	}
	run(t, c, 1, 1)
	if a := srv.accepted.Load(); a != 2 {
		t.Errorf("%d connections accepted, want 2 (the first closed when idle)", a)
	}
}

// BenchmarkExecuteConcurrent is the connector's share of an http
// command's CPU at high fan-out: 128 requests in flight to a loopback
// system, each as Perform sends it (an attempt context with the deadline,
// the request's deadline, the action's timeout). The server runs in the
// same process, so ns/op and cpu-ns/op (the process's CPU per request,
// steadier than ns/op on a shared machine) include it; compare runs with
// benchstat. HTTPCONN_TEST_CLIENT=net/http measures net/http instead of
// the default client (client_test.go).
//
//	go test ./internal/connectors/http -run '^$' -bench BenchmarkExecuteConcurrent -benchmem -count 6
func BenchmarkExecuteConcurrent(b *testing.B) {
	benchConcurrent(b, func(c *httpconn.Connector, r connectors.Request) {
		r.Deadline = time.Now().Add(2 * time.Second)
		ctx, cancel := context.WithDeadline(context.Background(), r.Deadline)
		if res := c.Execute(ctx, r); res.Kind != connectors.Succeeded {
			b.Error(res)
		}
		cancel()
	})
}

// BenchmarkPerformConcurrent is BenchmarkExecuteConcurrent with every
// request sent through effect.Perform under a cancellable parent, as the
// executor sends it: the attempt context is Perform's own (package effect,
// deadline.go), so what the connector asks of it (Done, Cancellation)
// shows in cpu-ns/op and allocs/op.
//
//	go test ./internal/connectors/http -run '^$' -bench BenchmarkPerformConcurrent -benchmem -count 6
func BenchmarkPerformConcurrent(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := effect.Policy{Timeout: 2 * time.Second}
	benchConcurrent(b, func(c *httpconn.Connector, r connectors.Request) {
		if d := effect.Perform(parent, c, r, p); d.Outcome != schemas.StatusSucceeded {
			b.Error(d)
		}
	})
}

// benchConcurrent runs send for b.N requests of their own key, 128 at a
// time, to a loopback system in the process answering 201 at once, and
// reports the process's CPU per request as cpu-ns/op.
func benchConcurrent(b *testing.B, send func(c *httpconn.Connector, r connectors.Request)) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer srv.Close()
	c, err := httpconn.New(httpconn.Config{URL: srv.URL + "/x", Timeout: 2 * time.Second, MaxConcurrent: 1024})
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.SetParallelism(64) // × GOMAXPROCS goroutines
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() { b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			send(c, req(fmt.Sprintf("k%d", n.Add(1)), `{"amount":500}`))
		}
	})
}
