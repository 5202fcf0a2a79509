package consumer_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// toggleAPI answers 503 while down, else applies each request once per
// key and remembers the keys of each entity in the order they came.
type toggleAPI struct {
	down  atomic.Bool
	posts atomic.Int64
	mu    sync.Mutex
	seen  map[string]int      // key → requests applied
	order map[string][]string // entity → keys applied, in order
}

func (a *toggleAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.posts.Add(1)
	if a.down.Load() {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
		return
	}
	if r.Method == http.MethodGet {
		// The lookup (confirm_url): an attempt our own stop cut short
		// (a probe out while a partition is revoked) is inherited and
		// confirmed, not left unresolved.
		a.mu.Lock()
		n := a.seen[strings.TrimPrefix(r.URL.Path, "/refunds/")]
		a.mu.Unlock()
		if n == 0 {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	ent := key[:strings.LastIndexByte(key, '-')]
	a.mu.Lock()
	a.seen[key]++
	a.order[ent] = append(a.order[ent], key)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

// paymentsDown is an actions file whose payments.refund goes to the
// system at url, with a breaker quick to open and to probe; more actions
// may follow it.
func paymentsDown(url string) string {
	return fmt.Sprintf(`systems:
  payments:
    max_concurrent: 4
    breaker:
      after: 2
      probe_every: 100ms
actions:
  payments.refund:
    connector: http
    url: %[1]s/refunds
    confirm_url: %[1]s/refunds/{key}
    system: payments
`, url)
}

// submitRefunds produces each payments.refund command <prefix><e>-<k>
// of entity ent-<prefix><e> with key ent-<prefix><e>-<k> (e < entities,
// k < each), the k-th of every entity before the (k+1)-th of any, and
// returns their ids.
func submitRefunds(h *onceflighttest.Harness, prefix string, entities, each int) []string {
	var ids []string
	for k := range each {
		for e := range entities {
			id := fmt.Sprintf("%s%d-%d", prefix, e, k)
			ids = append(ids, id)
			h.SubmitAction(id, "payments.refund", fmt.Sprintf("ent-%s%d", prefix, e), "ent-"+id, `{}`)
		}
	}
	return ids
}

// appliedOnceInOrder checks that api applied each key ent-<prefix><e>-<k>
// (e < entities, k < each) exactly once, each entity's in k's order.
func appliedOnceInOrder(t *testing.T, api *toggleAPI, prefix string, entities, each int) {
	t.Helper()
	api.mu.Lock()
	defer api.mu.Unlock()
	for e := range entities {
		ent := fmt.Sprintf("ent-%s%d", prefix, e)
		var want []string
		for k := range each {
			key := fmt.Sprintf("%s-%d", ent, k)
			want = append(want, key)
			if n := api.seen[key]; n != 1 {
				t.Errorf("key %s applied %d times", key, n)
			}
		}
		if got := api.order[ent]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("entity %s applied in the order %v, want %v", ent, got, want)
		}
	}
}

// Commands of a system that is down step aside past the few it keeps
// waiting, are read again from Kafka when it is back, and run then: each
// exactly once, each entity's in its order, while a healthy system's
// commands behind them in the topic are answered during the outage.
func TestSteppedAsideCommandsRunWhenTheSystemIsBack(t *testing.T) {
	api := &toggleAPI{seen: map[string]int{}, order: map[string][]string{}}
	api.down.Store(true)
	downURL := serve(t, api)
	fast := &fakeAPI{capacity: 1000, applied: map[string]int{}}
	fastURL := serve(t, fast)
	h := onceflighttest.New(t)
	h.UseConfig(paymentsDown(downURL) + fmt.Sprintf(`  notify.send:
    connector: http
    url: %s/notify
`, fastURL))
	h.Tune = func(c *consumer.Config) { c.MaxInflight, c.MaxBuffered = 8, 16 }
	h.Start(t.TempDir())
	const entities, each = 30, 3
	ids := submitRefunds(h, "p", entities, each)
	onceflighttest.WaitFor(t, 30*time.Second, "commands stepped aside", func() bool { return h.Ex.Parked() > 0 })
	seen := map[string][]schemas.Outcome{}
	if got := outcomesOf(t, h, seen, submitMany(t, h, "f", "notify.send", 5), 30*time.Second); got[schemas.StatusSucceeded] != 5 {
		t.Fatalf("healthy commands during the outage: %v", got)
	}
	for _, id := range ids {
		if len(seen[id]) > 0 {
			t.Fatalf("command %s answered while its system was down: %+v", id, seen[id])
		}
	}
	var stepped uint64
	for _, s := range h.Ex.SystemStats() {
		if s.Name == "payments" {
			stepped = s.SteppedAside
		}
	}
	if stepped == 0 {
		t.Fatal("no command stepped aside")
	}
	api.down.Store(false)
	if got := outcomesOf(t, h, seen, ids, 60*time.Second); got[schemas.StatusSucceeded] != len(ids) {
		t.Fatalf("after the system came back: %v", got)
	}
	appliedOnceInOrder(t, api, "p", entities, each)
	t.Logf("stepped aside %d times; %d requests to the system", stepped, api.posts.Load())
	if h.Ex.Parked() != 0 {
		t.Errorf("%d entities still parked", h.Ex.Parked())
	}
	h.Stop()
	h.Audit()
}

// Entities parked on a system that is down belong to their partition's
// ownership: when a second executor joins and takes some partitions, and
// when the first stops, the parked commands are consumed again by the new
// owner (their offsets were never committed past), and once the system is
// back each runs exactly once, each entity's in order.
func TestSteppedAsideCommandsMoveWithTheirPartition(t *testing.T) {
	t.Parallel() // it waits: for a rebalance and for revocations
	api := &toggleAPI{seen: map[string]int{}, order: map[string][]string{}}
	api.down.Store(true)
	h := onceflighttest.New(t)
	h.UseConfig(paymentsDown(serve(t, api)))
	tune := onceflighttest.NodeOptions{Tune: func(c *consumer.Config) {
		c.MaxInflight, c.MaxBuffered, c.RevokeTimeout = 8, 16, 2*time.Second
	}}
	a := h.StartNode("a", t.TempDir(), tune)
	const entities, each = 90, 2
	ids := submitRefunds(h, "m", entities, each)
	onceflighttest.WaitFor(t, 30*time.Second, "commands stepped aside on a", func() bool { return a.Ex.Parked() > 0 })
	b := h.StartNode("b", t.TempDir(), tune)
	onceflighttest.WaitFor(t, 60*time.Second, "commands stepped aside on b", func() bool { return b.Ex.Parked() > 0 })
	if err := a.Stop(); err != nil {
		t.Fatalf("a stopped: %v", err)
	}
	api.down.Store(false)
	seen := map[string][]schemas.Outcome{}
	if got := outcomesOf(t, h, seen, ids, 90*time.Second); got[schemas.StatusSucceeded] != len(ids) {
		t.Fatalf("after the system came back: %v", got)
	}
	appliedOnceInOrder(t, api, "m", entities, each)
	if err := b.Stop(); err != nil {
		t.Fatalf("b stopped: %v", err)
	}
	h.Audit()
}
