package consumer_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// fakeAPI is an external system on loopback with a concurrency limit of
// its own, as payment APIs have: beyond `capacity` requests at once it
// answers 429 with Retry-After. It applies each key once (a second
// application is counted, so a test can fail on it) and measures how much
// of its capacity was used.
type fakeAPI struct {
	capacity int
	work     time.Duration
	// retryAfter is the Retry-After header of a 429 ("" for none).
	retryAfter string
	// always429: refuse everything (a system that never stops).
	always429 bool

	inFlight atomic.Int32 // requests being handled, refused ones included
	peak     atomic.Int32
	posts    atomic.Int64
	refused  atomic.Int64

	mu      sync.Mutex
	applied map[string]int
	// busy is the sum of the accepted requests' handling times; first
	// and last bound them: busy / (capacity × (last−first)) is the
	// capacity used while the backlog drained.
	busy        time.Duration
	first, last time.Time
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.posts.Add(1)
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if f.always429 || int(n) > f.capacity {
		f.refused.Add(1)
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		http.Error(w, `{"message":"slow down"}`, http.StatusTooManyRequests)
		return
	}
	start := time.Now()
	time.Sleep(f.work)
	end := time.Now()
	f.mu.Lock()
	f.applied[r.Header.Get("Idempotency-Key")]++
	f.busy += end.Sub(start)
	if f.first.IsZero() || start.Before(f.first) {
		f.first = start
	}
	if end.After(f.last) {
		f.last = end
	}
	f.mu.Unlock()
	fmt.Fprint(w, `{"ok":true}`)
}

func (f *fakeAPI) utilisation() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.busy.Seconds() / (float64(f.capacity) * f.last.Sub(f.first).Seconds())
}

// serve runs h on loopback until the end of the test.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// submitMany produces n commands of action, one entity each, without
// waiting for each (a backlog arriving at once); ids are prefix+i.
func submitMany(t testing.TB, h *onceflighttest.Harness, prefix, action string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
		h.SubmitAction(ids[i], action, "ent-"+ids[i], "key-"+ids[i], `{}`)
	}
	return ids
}

// outcomesOf waits for one outcome of each id and counts their statuses.
func outcomesOf(t testing.TB, h *onceflighttest.Harness, seen map[string][]schemas.Outcome, ids []string, within time.Duration) map[schemas.Status]int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		missing := 0
		for _, id := range ids {
			if len(seen[id]) == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d commands unanswered after %s", missing, len(ids), within)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := h.Client().PollFetches(ctx)
		cancel()
		for _, r := range fs.Records() {
			if r.Topic != "onceflight.outcomes" {
				continue
			}
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				t.Fatalf("undecodable outcome: %v", err)
			}
			seen[o.CausationID] = append(seen[o.CausationID], o)
		}
	}
	count := map[schemas.Status]int{}
	for _, id := range ids {
		count[seen[id][0].Record.Status]++
	}
	return count
}

// Issue 21, "wait when asked": 400 refunds against a payments API that
// takes 4 at a time and answers the rest 429 with Retry-After: 1. None
// fails, each is applied once, the API never sees more at once than the
// executor's ceiling (max_concurrent 8), and the capacity it had is used.
func TestBacklogAgainstRateLimitedAPI(t *testing.T) {
	drainAgainstRateLimitedAPI(t, "payments", 8, func(url string) string {
		return fmt.Sprintf(`systems:
  payments:
    max_concurrent: 8
actions:
  payments.refund:
    connector: http
    url: %s/refunds
    timeout: 5s
    system: payments
`, url)
	})
}

// The same backlog as a new user meets it: no `systems:` block, so the
// action is a system of its own with the ceiling --max-inflight (64),
// sixteen times the API's capacity, the setting of the report
// (195 of 400 failed). The adaptive limit has to find the API's 4 on its
// own; no refund fails meanwhile.
func TestBacklogAgainstRateLimitedAPIWithoutLimits(t *testing.T) {
	drainAgainstRateLimitedAPI(t, "payments.refund", consumer.Defaults().MaxInflight, func(url string) string {
		return fmt.Sprintf(`actions:
  payments.refund:
    connector: http
    url: %s/refunds
    timeout: 5s
`, url)
	})
}

// drainAgainstRateLimitedAPI drains 400 refunds through the executor
// configured by yaml (given the API's URL) against an API that takes 4
// at a time, answering the rest 429 with Retry-After: 1; system names the
// action's system in the metrics, ceiling is its max_concurrent.
func drainAgainstRateLimitedAPI(t *testing.T, system string, ceiling int, yaml func(url string) string) {
	api := &fakeAPI{capacity: 4, work: 60 * time.Millisecond, retryAfter: "1", applied: map[string]int{}}
	url := serve(t, api)
	h := onceflighttest.New(t)
	reg := prometheus.NewRegistry()
	h.Reg = reg
	h.UseConfig(yaml(url))
	h.Start(t.TempDir())
	const n = 400
	ids := submitMany(t, h, "r", "payments.refund", n)
	seen := map[string][]schemas.Outcome{}
	count := outcomesOf(t, h, seen, ids, 3*time.Minute)
	if count[schemas.StatusSucceeded] != n {
		for _, id := range ids {
			if r := seen[id][0].Record; r.Status != schemas.StatusSucceeded {
				t.Errorf("%s: %s %+v", id, r.Status, r.Error)
				break
			}
		}
		t.Fatalf("statuses %v, want %d succeeded", count, n)
	}
	api.mu.Lock()
	for _, id := range ids {
		if c := api.applied["key-"+id]; c != 1 {
			t.Errorf("%s applied %d times", id, c)
		}
	}
	api.mu.Unlock()
	if p := api.peak.Load(); int(p) > ceiling {
		t.Fatalf("the API saw %d requests at once; the executor's ceiling is %d", p, ceiling)
	}
	limitNow, _ := kafkatest.Gauge(t, reg, "onceflight_system_concurrency_limit", "system", system)
	refused, _ := kafkatest.Gauge(t, reg, "onceflight_system_refused_total", "system", system, "answer", "busy")
	if int64(refused) != api.refused.Load() {
		t.Errorf("metric says %v refused, the API refused %d", refused, api.refused.Load())
	}
	// Measured, not asserted: the goal is 80 % (docs: "Protecting the
	// external system"); a loaded CI host measures less.
	t.Logf("capacity used while draining: %.0f%% (goal ≥ 80%%); %d POSTs for %d refunds, %d answered 429; peak at the API %d (capacity 4, ceiling %d); adaptive limit now %v",
		100*api.utilisation(), api.posts.Load(), n, api.refused.Load(), api.peak.Load(), ceiling, limitNow)
	h.Stop()
	h.Audit()
}

// outage is how long TestOutageRiddenOut keeps the service down: 6s in
// `make test`, ONCEFLIGHT_TEST_OUTAGE (e.g. 30s, the figure) to
// run it longer.
func outage(t *testing.T) time.Duration {
	if v := os.Getenv("ONCEFLIGHT_TEST_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("ONCEFLIGHT_TEST_OUTAGE: %v", err)
		}
		return d
	}
	return 6 * time.Second
}

// Issue 21, "ride out their outages": the service refuses connections for
// a while as commands arrive, then comes back on the same address. Every
// command succeeds once; none fails or is unresolved; the breaker opened
// and closed again, and the metrics show it.
func TestOutageRiddenOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // down: connection refused
	api := &fakeAPI{capacity: 1000, applied: map[string]int{}}

	h := onceflighttest.New(t)
	reg := prometheus.NewRegistry()
	h.Reg = reg
	h.UseConfig(fmt.Sprintf(`systems:
  payments:
    breaker: {after: 3, probe_every: 500ms}
actions:
  payments.refund:
    connector: http
    url: http://%s/refunds
    timeout: 2s
    system: payments
`, addr))
	h.Start(t.TempDir())
	down := outage(t)
	began := time.Now()
	ids := submitMany(t, h, "o", "payments.refund", 25)
	onceflighttest.WaitFor(t, down, "the breaker to open", func() bool {
		v, _ := kafkatest.Gauge(t, reg, "onceflight_system_breaker_state", "system", "payments")
		return v == 1
	})
	if !h.Ex.Ready() {
		// The executor is fine; the system is not (the metrics say so).
		t.Fatalf("not ready while a system is down: %s", h.Ex.NotReady())
	}
	ids = append(ids, submitMany(t, h, "p", "payments.refund", 25)...) // arriving during the outage
	// The commands waiting for the system are visible while it is down:
	// the most the metric showed until the service comes back.
	var waiting float64
	for time.Now().Before(began.Add(down)) {
		w, _ := kafkatest.Gauge(t, reg, "onceflight_system_waiting_commands", "system", "payments")
		waiting = max(waiting, w)
		time.Sleep(100 * time.Millisecond)
	}
	if waiting < 1 {
		t.Fatalf("no command showed as waiting for the system during its outage")
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the service cannot come back on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: api}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	seen := map[string][]schemas.Outcome{}
	count := outcomesOf(t, h, seen, ids, time.Minute)
	if count[schemas.StatusSucceeded] != len(ids) {
		t.Fatalf("statuses %v, want %d succeeded", count, len(ids))
	}
	api.mu.Lock()
	for _, id := range ids {
		if c := api.applied["key-"+id]; c != 1 {
			t.Errorf("%s applied %d times", id, c)
		}
	}
	api.mu.Unlock()
	opened, _ := kafkatest.Gauge(t, reg, "onceflight_system_breaker_opened_total", "system", "payments")
	state, _ := kafkatest.Gauge(t, reg, "onceflight_system_breaker_state", "system", "payments")
	refusedDown, _ := kafkatest.Gauge(t, reg, "onceflight_system_refused_total", "system", "payments", "answer", "down")
	if opened < 1 || state != 0 {
		t.Fatalf("breaker opened %v times, state now %v; want opened and closed", opened, state)
	}
	if !h.Ex.Ready() {
		t.Fatalf("not ready after the outage: %s", h.Ex.NotReady())
	}
	t.Logf("outage %s: %v connections refused, breaker opened %v times, at most %v commands waiting, %d POSTs once back for %d commands",
		down, refusedDown, opened, waiting, api.posts.Load(), len(ids))
	h.Stop()
	h.Audit()
}

// Issue 21, "bulkheads": hundreds of commands in flight to a service that
// does not answer do not hold up commands for another, healthy service:
// those are answered while the slow ones are still out.
func TestSlowSystemDoesNotStarveHealthyOne(t *testing.T) {
	release := make(chan struct{})
	var slowIn atomic.Int32
	slow := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowIn.Add(1)
		defer slowIn.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, `{}`)
	}))
	fast := &fakeAPI{capacity: 1000, applied: map[string]int{}}
	fastURL := serve(t, fast)
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`actions:
  payments.refund:
    connector: http
    url: %s/refunds
    timeout: 60s
  notify.send:
    connector: http
    url: %s/notify
    timeout: 5s
`, slow, fastURL))
	h.Tune = func(c *consumer.Config) { c.MaxInflight = 256 }
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	// The healthy service's latency alone, to compare with (logged).
	began := time.Now()
	outcomesOf(t, h, seen, submitMany(t, h, "g", "notify.send", 20), 30*time.Second)
	alone := time.Since(began)
	slowIDs := submitMany(t, h, "s", "payments.refund", 300)
	onceflighttest.WaitFor(t, 30*time.Second, "200 requests in flight to the slow service", func() bool { return slowIn.Load() >= 200 })
	began = time.Now()
	fastIDs := submitMany(t, h, "f", "notify.send", 20)
	count := outcomesOf(t, h, seen, fastIDs, 30*time.Second)
	beside := time.Since(began)
	stillOut := slowIn.Load()
	for _, id := range slowIDs {
		if len(seen[id]) > 0 {
			t.Fatalf("slow command %s answered before the slow service was released", id)
		}
	}
	if count[schemas.StatusSucceeded] != len(fastIDs) || stillOut < 200 {
		t.Fatalf("healthy commands %v; %d slow requests still out", count, stillOut)
	}
	// Measured, not asserted (no timing thresholds in tests).
	t.Logf("20 commands for the healthy service: submitted and answered in %s alone, in %s with %d requests held at the slow one", alone.Round(time.Millisecond), beside.Round(time.Millisecond), stillOut)
	close(release)
	count = outcomesOf(t, h, seen, slowIDs, time.Minute)
	if count[schemas.StatusSucceeded] != len(slowIDs) {
		t.Fatalf("slow commands %v", count)
	}
	h.Stop()
	h.Audit()
}

// Issue 21: a system that never stops answering 429 ends the command
// failed connector_unavailable after give_up_after, with the last answer
// and the number of waits in the record. Its Retry-After is honoured:
// no request comes back sooner than it asked.
func TestNeverEnding429GivesUp(t *testing.T) {
	api := &fakeAPI{always429: true, retryAfter: "1", applied: map[string]int{}}
	url := serve(t, api)
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`actions:
  payments.refund:
    connector: http
    url: %s/refunds
    give_up_after: 2500ms
`, url))
	h.Start(t.TempDir())
	ids := submitMany(t, h, "n", "payments.refund", 1)
	seen := map[string][]schemas.Outcome{}
	outcomesOf(t, h, seen, ids, 30*time.Second)
	rec := seen[ids[0]][0].Record
	if rec.Status != schemas.StatusFailed || rec.Error == nil || rec.Error.Code != schemas.CodeConnectorUnavailable {
		t.Fatalf("record %s %+v", rec.Status, rec.Error)
	}
	msg := rec.Error.Message
	if !strings.Contains(msg, "give_up_after (2.5s)") || !strings.Contains(msg, "last answer: HTTP 429: slow down (Retry-After 1s)") ||
		!strings.Contains(msg, fmt.Sprintf("waited %d times", api.posts.Load())) {
		t.Fatalf("message %q after %d POSTs", msg, api.posts.Load())
	}
	// Retry-After: 1 within 2.5 s leaves room for at most 4 requests;
	// the default backoff alone (100 ms, doubling) would send 6 or more.
	if p := api.posts.Load(); p < 2 || p > 4 {
		t.Fatalf("%d POSTs within give_up_after 2.5s at Retry-After: 1", p)
	}
	h.Stop()
	h.Audit()
}

// A command waiting for its system (here a Retry-After of 30 s) when its
// executor stops is taken over by the next one, which executes it again
// without confirming: the record written after the "not done" answer says
// nothing is in flight and nothing happened. The action cannot confirm,
// so without that record the command would end unresolved.
func TestWaitingCommandSurvivesRestart(t *testing.T) {
	var open atomic.Bool
	api := &fakeAPI{capacity: 1000, applied: map[string]int{}}
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !open.Load() {
			api.posts.Add(1)
			w.Header().Set("Retry-After", "30")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		api.ServeHTTP(w, r)
	}))
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  payments.refund:\n    connector: http\n    url: %s/refunds\n", url))
	h.Tune = func(c *consumer.Config) { c.RevokeTimeout = time.Second }
	dir := t.TempDir()
	h.Start(dir)
	ids := submitMany(t, h, "w", "payments.refund", 1)
	onceflighttest.WaitFor(t, 20*time.Second, "the not-done record", func() bool {
		// An intent: in the executor's overlay, not in Pebble.
		rec, ok, err := h.Ex.Seen("ent-w0", "key-w0")
		return err == nil && ok && rec.Status == schemas.StatusInProgress && rec.Error != nil
	})
	h.Stop()
	open.Store(true)
	h.Start(dir)
	seen := map[string][]schemas.Outcome{}
	outcomesOf(t, h, seen, ids, 30*time.Second)
	rec := seen[ids[0]][0].Record
	if rec.Status != schemas.StatusSucceeded || rec.Attempts != 2 {
		t.Fatalf("after a restart while waiting: %s after %d attempts %+v", rec.Status, rec.Attempts, rec.Error)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.applied["key-w0"] != 1 {
		t.Fatalf("applied %d times", api.applied["key-w0"])
	}
}

// Issue 21, item 7 and the second half of item 6: a command waiting for
// its system (here a Retry-After) keeps its entity's turn, so the
// entity's next command does not overtake it, and holds no execution
// slot, so another entity's command goes out meanwhile even with
// --max-inflight 1. The API refuses the first command until the other
// entity's command has been applied: were the slot held while waiting,
// neither could finish (the first gives up after give_up_after).
func TestWaitingCommandKeepsItsTurnAndNoSlot(t *testing.T) {
	var mu sync.Mutex
	var applied []string
	overtook, refusals := 0, 0
	has := func(k string) bool {
		for _, a := range applied {
			if a == k {
				return true
			}
		}
		return false
	}
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		k := r.Header.Get("Idempotency-Key")
		switch {
		case k == "key-e1" && !has("key-f1"):
			refusals++
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		case k == "key-e2" && !has("key-e1"):
			overtook++
		}
		applied = append(applied, k)
		fmt.Fprint(w, `{}`)
	}))
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  payments.refund:\n    connector: http\n    url: %s/refunds\n    give_up_after: 20s\n", url))
	h.Tune = func(c *consumer.Config) { c.MaxInflight, c.MaxInflightPerPartition = 1, 1 }
	h.Start(t.TempDir())
	h.SubmitAction("e1", "payments.refund", "ent-e", "key-e1", `{}`)
	h.SubmitAction("e2", "payments.refund", "ent-e", "key-e2", `{}`)
	onceflighttest.WaitFor(t, 20*time.Second, "the first command to be told to wait", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refusals > 0
	})
	// The other entity is on the same partition, so that neither the
	// process's slot nor the partition's is free for it unless the
	// waiting command gave its own back.
	other := "ent-f"
	for i := 0; partitioner.ForEntity(other, onceflighttest.Partitions) != partitioner.ForEntity("ent-e", onceflighttest.Partitions); i++ {
		other = fmt.Sprintf("ent-f%d", i)
	}
	h.SubmitAction("f1", "payments.refund", other, "key-f1", `{}`)
	ids := []string{"e1", "e2", "f1"}
	seen := map[string][]schemas.Outcome{}
	count := outcomesOf(t, h, seen, ids, time.Minute)
	if count[schemas.StatusSucceeded] != len(ids) {
		for _, id := range ids {
			r := seen[id][0].Record
			t.Logf("%s: %s %+v", id, r.Status, r.Error)
		}
		t.Fatalf("statuses %v, want %d succeeded", count, len(ids))
	}
	mu.Lock()
	defer mu.Unlock()
	if overtook != 0 || strings.Join(applied, ",") != "key-f1,key-e1,key-e2" {
		t.Fatalf("applied in the order %v (%d overtakings); want the other entity first, then the entity's commands in order", applied, overtook)
	}
	h.Stop()
	h.Audit()
}
