package consumer_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// graceService is an http service whose first attempt of k1 never answers
// (the executor is stopped while it waits) and takes effect only late: at
// the old attempt's deadline plus half the clock-drift margin, as a request
// queued behind a proxy, or sent by an owner whose clock runs behind, would.
// It records every request.
type graceService struct {
	mu      sync.Mutex
	reqs    []graceReq
	applyAt time.Time // zero until k1's first attempt arrived
	drift   time.Duration
	hung    chan struct{}
	quit    chan struct{} // closed at the end: hung requests return
}

type graceReq struct {
	at             time.Time
	method, key    string
	attempt, token string
}

func newGraceService(drift time.Duration) *graceService {
	return &graceService{drift: drift, hung: make(chan struct{}, 1), quit: make(chan struct{})}
}

func (g *graceService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if r.Method == http.MethodGet {
		key = r.URL.Query().Get("key")
	}
	g.mu.Lock()
	g.reqs = append(g.reqs, graceReq{at: time.Now(), method: r.Method, key: key,
		attempt: r.Header.Get("Onceflight-Attempt"), token: r.Header.Get("Onceflight-Fencing-Token")})
	first := r.Method == http.MethodPost && key == "k1" && g.applyAt.IsZero()
	if first {
		d, err := time.Parse(time.RFC3339Nano, r.Header.Get("Onceflight-Deadline"))
		if err != nil {
			g.mu.Unlock()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.applyAt = d.Add(g.drift / 2)
	}
	applied := !g.applyAt.IsZero() && !time.Now().Before(g.applyAt)
	g.mu.Unlock()
	switch {
	case first:
		select {
		case g.hung <- struct{}{}:
		default:
		}
		select { // the executor is stopped; the effect lands at applyAt
		case <-r.Context().Done():
		case <-g.quit:
		}
	case r.Method == http.MethodGet && key == "k1" && applied:
		fmt.Fprint(w, `{"applied":true}`)
	case r.Method == http.MethodGet:
		http.NotFound(w, r)
	default:
		fmt.Fprint(w, `{"ok":true}`)
	}
}

func (g *graceService) requests() []graceReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]graceReq(nil), g.reqs...)
}

// inheritGrace runs k1's first attempt on one executor, stops it while the
// attempt is in flight (the action's timeout is longer than the graceful
// stop's 5s bound, so the attempt is abandoned, as by a crash), starts another on a fresh data dir (restore from
// the journal) with k2 of the same entity queued, and checks that the new
// owner sent nothing — no confirmation, no attempt of k1, no k2 — before
// k1's recorded deadline plus the clock drift, and that k1 took effect once.
func inheritGrace(t *testing.T, actions func(url string) string) {
	const drift = 500 * time.Millisecond
	h := onceflighttest.New(t)
	g := newGraceService(drift)
	svc := httptest.NewServer(g)
	defer svc.Close()
	defer close(g.quit)
	h.UseConfig(actions(svc.URL))
	h.Tune = func(c *consumer.Config) {
		c.ClockDrift = drift
		c.RevokeTimeout = 100 * time.Millisecond
	}
	h.Start(t.TempDir())
	h.SubmitAction("c1", "pay.call", "order-1", "k1", `{"amount":1}`)
	select {
	case <-g.hung:
	case <-time.After(20 * time.Second):
		t.Fatal("k1's first attempt never arrived")
	}
	h.Stop()

	var deadline time.Time
	for _, r := range h.Journal(partitioner.ForEntity("order-1", 3)) {
		if string(r.Key) != "k1" {
			continue
		}
		rec, err := schemas.UnmarshalRecord(r.Value)
		if err == nil && rec.Status == schemas.StatusInProgress && rec.Deadline != nil {
			deadline = *rec.Deadline
		}
	}
	if deadline.IsZero() {
		t.Fatal("no in_progress record of k1 with a deadline in the journal")
	}
	if time.Now().After(deadline) {
		t.Fatalf("the executor stopped after k1's deadline %s: nothing left to wait for", deadline.Format(time.RFC3339Nano))
	}
	firstCount := len(g.requests())

	h.Start(t.TempDir())
	h.SubmitAction("c2", "pay.call", "order-1", "k2", `{"amount":2}`)
	seen := map[string][]schemas.Outcome{}
	for n := 1; len(seen["c1"]) == 0 || len(seen["c2"]) == 0; n++ {
		h.Outcomes(n, seen, nil)
	}
	h.Stop()

	grace := deadline.Add(drift)
	k1Posts := 0
	for i, r := range g.requests() {
		if r.method == http.MethodPost && r.key == "k1" {
			k1Posts++
		}
		if i < firstCount {
			continue
		}
		if r.at.Before(grace) {
			t.Errorf("new owner sent %s %s (attempt %s) at %s, %s before the inherited deadline %s + drift %s",
				r.method, r.key, r.attempt, r.at.Format(time.RFC3339Nano), grace.Sub(r.at).Round(time.Millisecond),
				deadline.Format(time.RFC3339Nano), drift)
		}
	}
	if got := seen["c1"][0].Record.Status; got != schemas.StatusSucceeded {
		t.Errorf("c1: %s %+v", got, seen["c1"][0].Record.Error)
	}
	if got := seen["c2"][0].Record.Status; got != schemas.StatusSucceeded {
		t.Errorf("c2: %s", got)
	}
	kafkatest.OneOutcomeEach(t, seen, []string{"c1", "c2"})
	if want := k1PostsWant(actions(svc.URL)); k1Posts != want {
		t.Errorf("k1 posted %d times, want %d", k1Posts, want)
	}
	h.Audit()
}

// k1PostsWant: with a confirmation the late effect is found and k1 is not
// sent again; without one (idempotent_by_key) it is sent again once, after
// the grace, and the service deduplicates it.
func k1PostsWant(yaml string) int {
	if strings.Contains(yaml, "confirm_url") {
		return 1
	}
	return 2
}

// TestFaultGraceConfirmWaitsForDeadlinePlusDrift: the old attempt's effect
// lands after its deadline but within the drift margin. A new owner that
// confirmed at the deadline would hear "not found" and send k1 again.
func TestFaultGraceConfirmWaitsForDeadlinePlusDrift(t *testing.T) {
	inheritGrace(t, func(url string) string {
		return fmt.Sprintf(`actions:
  pay.call:
    connector: http
    url: %[1]s/pay
    confirm_url: %[1]s/pay?key={key}
    timeout: 6s
    max_attempts: 2
`, url)
	})
}

// TestFaultGraceIdempotentByKeyWithoutConfirm: with no way to confirm, an
// idempotent_by_key action is executed again by the new owner — only after
// the old attempt's deadline plus drift, so the two attempts never overlap.
func TestFaultGraceIdempotentByKeyWithoutConfirm(t *testing.T) {
	inheritGrace(t, func(url string) string {
		return fmt.Sprintf(`actions:
  pay.call:
    connector: http
    url: %s/pay
    timeout: 6s
    max_attempts: 2
    idempotent_by_key: true
`, url)
	})
}
