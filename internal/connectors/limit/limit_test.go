package limit_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/internal/connectors/limit"
)

var (
	ok   = connectors.Result{Kind: connectors.Succeeded}
	busy = connectors.Result{Kind: connectors.Unavailable, Signal: connectors.SignalBusy}
	down = connectors.Result{Kind: connectors.Unavailable, Signal: connectors.SignalDown}
)

func acquire(t *testing.T, s *limit.System) effect.Permit {
	t.Helper()
	p, err := s.Acquire(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// No more requests in flight than the limit, however many ask at once.
func TestConcurrencyCeiling(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 3})
	var in, peak atomic.Int32
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			p := acquire(t, s)
			n := in.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			in.Add(-1)
			p.Done(ok, 2*time.Millisecond)
		})
	}
	wg.Wait()
	if peak.Load() > 3 || peak.Load() < 2 {
		t.Fatalf("peak in flight %d with a ceiling of 3", peak.Load())
	}
	if st := s.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("after: %+v", st)
	}
}

// A busy answer cuts the limit once per round of requests; healthy
// answers under load bring it back to the ceiling, never above.
func TestAIMD(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 10})
	// Ten requests of one round all answered busy: one cut, not ten.
	var ps []effect.Permit
	for range 10 {
		ps = append(ps, acquire(t, s))
	}
	for _, p := range ps {
		p.Done(busy, time.Millisecond)
	}
	if l := s.Stats().Limit; l != 9 {
		t.Fatalf("limit %d after one round of busy answers, want 9", l)
	}
	// Rounds of busy answers, one request each, cut further.
	for range 20 {
		acquire(t, s).Done(busy, time.Millisecond)
	}
	if l := s.Stats().Limit; l != 1 {
		t.Fatalf("limit %d after 20 rounds of busy answers, want 1", l)
	}
	// Healthy answers while one request at a time is in flight say
	// nothing about more: the limit grows only while one is half of it.
	for range 50 {
		acquire(t, s).Done(ok, time.Millisecond)
	}
	if l := s.Stats().Limit; l > 3 {
		t.Fatalf("limit %d after answers to one request at a time, want at most 3", l)
	}
	// Rounds that fill the limit raise it to the ceiling.
	for range 100 {
		ps = ps[:0]
		for range s.Stats().Limit {
			ps = append(ps, acquire(t, s))
		}
		for _, p := range ps {
			p.Done(ok, time.Millisecond)
		}
	}
	if st := s.Stats(); st.Limit != 10 || st.Busy != 30 {
		t.Fatalf("after healthy answers: %+v, want limit 10 (the ceiling), 30 busy", st)
	}
}

// Consecutive down answers open the breaker; a waiting command gets
// through only as the probe, and the probe's answer closes it.
func TestBreaker(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 4, BreakerAfter: 3, ProbeEvery: 50 * time.Millisecond})
	for range 3 {
		acquire(t, s).Done(down, time.Millisecond)
	}
	if st := s.Stats(); st.Breaker != limit.Open || st.Opened != 1 {
		t.Fatalf("after 3 down answers: %+v", st)
	}
	// Two commands wait; a probe goes out every ProbeEvery, one at a time.
	got := make(chan effect.Permit, 2)
	for range 2 {
		go func() { got <- acquire(t, s) }()
	}
	probe := <-got
	select {
	case <-got:
		t.Fatal("a second request left while the breaker was half open")
	case <-time.After(30 * time.Millisecond):
	}
	probe.Done(down, time.Millisecond) // still down: open again
	if st := s.Stats(); st.Breaker != limit.Open || st.Opened != 1 || st.Waiting != 1 {
		t.Fatalf("after a failed probe: %+v", st)
	}
	probe = <-got
	probe.Done(ok, time.Millisecond)
	if st := s.Stats(); st.Breaker != limit.Closed || st.Closed != 1 || st.Down != 4 {
		t.Fatalf("after a good probe: %+v", st)
	}
}

// A command that stops waiting (its deadline, give_up_after) leaves the
// line and takes no slot with it.
func TestGiveUpWhileWaiting(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 1})
	p := acquire(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, time.Time{}); err == nil {
		t.Fatal("acquired past the limit")
	}
	if st := s.Stats(); st.Waiting != 0 || st.InFlight != 1 {
		t.Fatalf("after giving up: %+v", st)
	}
	p.Done(ok, time.Millisecond)
	acquire(t, s).Done(ok, time.Millisecond)
	// A notBefore past the context's end gives up too, counted as
	// waiting meanwhile.
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, time.Now().Add(time.Hour)); err == nil {
		t.Fatal("acquired before notBefore")
	}
}

// Latency that doubles under load cuts the limit, as a 429 would.
func TestLatencyRiseCuts(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 4})
	round := func(took time.Duration) {
		ps := make([]effect.Permit, 0, 4)
		for range s.Stats().Limit {
			ps = append(ps, acquire(t, s))
		}
		for _, p := range ps {
			p.Done(ok, took)
		}
	}
	for range 10 {
		round(20 * time.Millisecond)
	}
	if l := s.Stats().Limit; l != 4 {
		t.Fatalf("limit %d with a steady latency, want the ceiling 4", l)
	}
	for range 3 {
		round(200 * time.Millisecond)
	}
	if l := s.Stats().Limit; l >= 4 {
		t.Fatalf("limit %d after latency rose tenfold, want it cut", l)
	}
}

// records keeps the log records a System writes.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// limitLines returns the "from → to (changes)" of each line about the limit.
func (r *records) limitLines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Message != "external system concurrency limit changed" {
			continue
		}
		a := map[string]string{}
		rec.Attrs(func(at slog.Attr) bool { a[at.Key] = at.Value.String(); return true })
		out = append(out, a["from"]+"→"+a["to"]+" ("+a["changes"]+")")
	}
	return out
}

// The limit's changes are logged, not each answer: the first at once,
// the ones soon after it in one line when the interval has passed, which
// names the limit the system settled at.
func TestLimitChangesLoggedNotEachAnswer(t *testing.T) {
	logs := &records{}
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 10, Logger: slog.New(logs)})
	limit.SetLogEvery(s, 100*time.Millisecond)
	for range 5 { // five rounds of busy answers: 10 → 9 → 8 → 7 → 6 → 5
		acquire(t, s).Done(busy, time.Millisecond)
	}
	if got := logs.limitLines(); len(got) != 1 || got[0] != "10→9 (1)" {
		t.Fatalf("lines right after the cuts: %q, want one for the first", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(logs.limitLines()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := logs.limitLines(); len(got) != 2 || got[1] != "9→5 (4)" {
		t.Fatalf("lines: %q, want the held-back changes in one line naming the limit now (5)", got)
	}
}

// A permit taken while a slot is free and nobody waits costs one
// allocation (the permit): no waiter, channel or select per request, which
// at a thousand requests in flight is most of them. Queued waiters keep
// their order (TestConcurrencyCeiling, TestGiveUpWhileWaiting).
func TestFreeSlotTakenWithoutWaiter(t *testing.T) {
	s := limit.New(limit.Config{Name: "svc", MaxConcurrent: 4})
	held := acquire(t, s) // one in flight: the fast path is not only for an idle system
	allocs := testing.AllocsPerRun(200, func() {
		p, err := s.Acquire(context.Background(), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		p.Done(ok, time.Millisecond)
	})
	held.Done(ok, time.Millisecond)
	if allocs > 1 {
		t.Errorf("%.1f allocations per permit with a free slot, want at most 1 (the permit)", allocs)
	}
	if st := s.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("after: %+v", st)
	}
}
