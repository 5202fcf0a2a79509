package consumer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// The siblings of TestReleaseDoesNotReArmRedeliveredCommands (issue 19):
// an approval, a resolution and a reconciler's confirmation, each
// followed by a restart on the same data dir, a restart on an empty one
// (restored from the journal) and a takeover by a second executor, while
// another entity's slow command holds partition 0's committed offset, so
// that every command answered before is consumed again. Each command
// consumed again gets its first answer (or its settlement, for a command
// first answered unresolved or held), nothing takes effect twice at the
// external system, and the audit — which fails on a command answered twice
// differently — passes.

// handovers are the three ways the partitions change hands.
var handovers = []string{"same data dir", "empty data dir", "takeover"}

// owner runs the executor that owns every partition: "A" until a
// takeover hands them to "B".
type owner struct {
	t    *testing.T
	h    *onceflighttest.Harness
	node *onceflighttest.Node
	dir  string
	tune func(*consumer.Config)
	slow *slowService
}

// startOwner starts executor A with yaml (which must configure slow.call
// on slowURL), signing keys and a quick graceful stop, then submits the
// command "slow" of an entity of partition 0 and waits until it is held
// at the slow service: partition 0's committed offset stays below every
// later command until the next owner settles it. It returns another
// entity of partition 0.
//
// The service holds every request of "kx" until handOver has stopped A,
// not only the first: A's stop ends up to RevokeTimeout+5s after it
// begins (the graceful stop waits that long for running commands), and in
// a takeover it begins only once B owns a partition, which can take a
// heartbeat interval and two rounds of the cooperative rebalance. An
// attempt of A that reaches its deadline (slow.call's timeout) first is
// sent again and held again (slowCallYAML's max_attempts), so A cannot
// answer "slow" before it stops, however the timings fall.
func startOwner(t *testing.T, h *onceflighttest.Harness, yaml string, svc *slowService) (*owner, *schemas.ControlKeys, string) {
	t.Helper()
	k, err := schemas.NewControlKey("ops-1")
	if err != nil {
		t.Fatal(err)
	}
	ks := &schemas.ControlKeys{Keys: []schemas.ControlKey{k}}
	h.UseConfig(yaml)
	svc.holdUntilRelease()
	o := &owner{t: t, h: h, dir: t.TempDir(), slow: svc, tune: func(c *consumer.Config) {
		c.ControlKeys = ks
		c.RevokeTimeout = 100 * time.Millisecond
	}}
	o.node = o.start("A", o.dir)
	onceflighttest.WaitFor(t, 30*time.Second, "executor A to own the 3 partitions", func() bool { return o.node.Owns(onceflighttest.Partitions) })
	same, _ := entitiesOn(0, 2)
	h.SubmitAction("slow", "slow.call", same[0], "kx", `{}`)
	svc.wait(t, "kx")
	return o, ks, same[1]
}

// handOver stops the owner and gives its partitions to the next one, as
// how says, before the committed offset of partition 0 passes "slow"; the
// slow service answers "slow" once the owner has stopped.
func (o *owner) handOver(how string) {
	o.t.Helper()
	next := "A"
	switch how {
	case "same data dir":
		o.stop()
	case "empty data dir":
		o.stop()
		o.dir = o.t.TempDir()
	case "takeover":
		// B joins while A still runs; A then leaves, and B, whose data
		// dir is empty, owns every partition.
		next = "B"
		b := o.start("B", o.t.TempDir())
		onceflighttest.WaitFor(o.t, 30*time.Second, "executor B to join the group and own a partition", func() bool {
			return b.Ex.Ready() && len(b.Ex.Owned()) > 0
		})
		o.stop()
		o.node = b
		onceflighttest.WaitFor(o.t, 30*time.Second, "executor B to own the 3 partitions after A left", func() bool { return b.Owns(onceflighttest.Partitions) })
		return
	default:
		o.t.Fatalf("unknown handover %q", how)
	}
	o.node = o.start(next, o.dir)
	onceflighttest.WaitFor(o.t, 30*time.Second, "the restarted executor to own the 3 partitions", func() bool { return o.node.Owns(onceflighttest.Partitions) })
}

// start starts executor id on dir. Its heartbeats are short, so that a
// takeover's B joins soon after it starts (the group waits for A's next
// heartbeat) and A's graceful stop, which begins once B owns a partition,
// ends before A's attempt of "slow" reaches its deadline: then B need not
// wait for the deadline of a second attempt (startOwner) to inherit it.
func (o *owner) start(id, dir string) *onceflighttest.Node {
	return o.h.StartNode(id, dir, onceflighttest.NodeOptions{Tune: o.tune, KafkaOpts: kafkatest.ShortHeartbeats})
}

func (o *owner) stop() {
	o.t.Helper()
	if err := o.node.Stop(); err != nil {
		o.t.Fatalf("executor %s: run: %v", o.node.ID, err)
	}
	o.slow.release()
}

// decisionService is the external system of these tests: it counts the
// POSTs of each idempotency key (each one an effect), answers them 201 —
// or 500 after applying, when ambiguous — and answers GET /{key}
// (confirm_url) found once confirmable, 503 before.
type decisionService struct {
	mu          sync.Mutex
	posts       map[string]int
	ambiguous   bool
	confirmable atomic.Bool
	url         string
}

func newDecisionService(t *testing.T, ambiguous bool) *decisionService {
	s := &decisionService{posts: map[string]int{}, ambiguous: ambiguous}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if !s.confirmable.Load() {
				http.Error(w, "confirm unavailable", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprint(w, `{"found":true}`)
			return
		}
		s.mu.Lock()
		s.posts[r.Header.Get("Idempotency-Key")]++
		s.mu.Unlock()
		if s.ambiguous {
			http.Error(w, "boom after applying", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// effects is how many POSTs of key the service received.
func (s *decisionService) effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts[key]
}

// slowCallYAML is the slow.call action of startOwner, on slowURL. Its
// max_attempts is far more than the attempts (of timeout each) that can
// end before the owner stops: none of them gives up on "slow".
const slowCallYAML = `  slow.call:
    connector: http
    url: %s
    timeout: 8s
    max_attempts: 100
    idempotent_by_key: true
`

// answersOf checks that every answer of command id is its first answer or
// the settlement that followed it: at most two outcome ids, the second
// only after a first answer of status from, and the last answer of
// status last.
func answersOf(t *testing.T, seen map[string][]schemas.Outcome, id string, from, last schemas.Status) {
	t.Helper()
	os := seen[id]
	if len(os) == 0 {
		t.Errorf("%s: no answer", id)
		return
	}
	ids := []string{os[0].ID}
	for _, o := range os[1:] {
		if o.ID != ids[len(ids)-1] {
			ids = append(ids, o.ID)
		}
	}
	switch {
	case len(ids) > 2 || len(ids) == 2 && os[0].Record.Status != from:
		var got []string
		for _, o := range os {
			got = append(got, fmt.Sprintf("%s %s (%s)", o.Record.Status, code(o), o.ID[:8]))
		}
		t.Errorf("%s answered %v: want its first answer, then at most its settlement", id, got)
	case os[len(os)-1].Record.Status != last:
		t.Errorf("%s: last answer %s %s, want %s", id, os[len(os)-1].Record.Status, code(os[len(os)-1]), last)
	}
}

// sibling is one scenario under one handover: the harness, the external
// system, the owner, the signing keys, the entity of partition 0 the
// scenario runs on, and the answers read so far.
type sibling struct {
	h    *onceflighttest.Harness
	svc  *decisionService
	o    *owner
	ks   *schemas.ControlKeys
	ent  string
	seen map[string][]schemas.Outcome
}

// eachHandover runs scenario under each handover, with the actions of
// actions (a format of the decision service's URL, %[1]s) beside
// slow.call. Each scenario ends with the audit of what was published,
// then auditCatches: the audit passes, and fails on a wrong answer.
func eachHandover(t *testing.T, ambiguous bool, actions string, scenario func(t *testing.T, s *sibling, how string)) {
	for _, how := range handovers {
		t.Run(how, func(t *testing.T) {
			h := onceflighttest.New(t)
			slow, slowURL := newSlowService(t, "kx")
			svc := newDecisionService(t, ambiguous)
			o, ks, ent := startOwner(t, h, fmt.Sprintf(actions, svc.url)+fmt.Sprintf(slowCallYAML, slowURL), slow)
			scenario(t, &sibling{h: h, svc: svc, o: o, ks: ks, ent: ent, seen: map[string][]schemas.Outcome{}}, how)
		})
	}
}

// auditCatches publishes, beside the executor's answers, the answer a
// wrong decision would have given the command of o when it was consumed
// again — o's record with status st and error code — and checks that the
// audit, which passed on the real history, fails once_per_key on it.
func auditCatches(t *testing.T, h *onceflighttest.Harness, o schemas.Outcome, st schemas.Status, errCode string) {
	t.Helper()
	rec := o.Record
	rec.Status, rec.Result = st, nil
	rec.Error = &schemas.Error{Code: errCode, Message: "the wrong answer to a command consumed again"}
	r, err := wire.EncodeOutcome(rec, o.CausationID, false)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = "onceflight.outcomes" // keyed by entity: on the entity's partition
	h.Produce(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rep, err := audit.Run(ctx, audit.Options{Client: cl})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, c := range rep.Checks {
		if c.Name == audit.CheckOncePerKey {
			if c.OK {
				t.Errorf("the audit passes with %s answered %s %s after its first answer %s: it would not catch the wrong answer", o.CausationID, st, errCode, o.Record.Status)
			}
			return
		}
	}
	t.Errorf("the audit has no %s check", audit.CheckOncePerKey)
}

// TestApprovalConsumedAgain: h2 duplicates h1's unique_by tuple and is
// held; an operator approves it and it executes. Consumed again after the
// handover, h1 and h2 are republished (no second POST), the approval is
// answered as it was (applied, not rejected not_unresolved), a later
// duplicate is still held and a second approval of b2 is refused.
func TestApprovalConsumedAgain(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	eachHandover(t, false, `actions:
  pay.hold:
    connector: http
    url: %[1]s/pay
    timeout: 2s
    unique_by: [order_id]
    on_duplicate: hold
`, func(t *testing.T, s *sibling, how string) {
		h, seen := s.h, s.seen
		h.SubmitAction("h1", "pay.hold", s.ent, "b1", `{"order_id":"o-9"}`)
		h.SubmitAction("h2", "pay.hold", s.ent, "b2", `{"order_id":"o-9","note":"again"}`)
		h.Outcomes(2, seen, nil)
		if o := seen["h2"][0]; o.Record.Status != schemas.StatusHeld {
			t.Fatalf("h2 before the approval: %s %s, want held", o.Record.Status, code(o))
		}
		h.Decide(s.ks, "ok", schemas.TypeApprove, s.ent, schemas.Decision{Key: "b2", Reason: "customer asked twice", By: "ann"})
		h.Outcomes(4, seen, nil) // the approval's answer and h2's settlement
		if n := s.svc.effects("b2"); n != 1 {
			t.Fatalf("b2 took effect %d times after its approval, want 1", n)
		}
		s.o.handOver(how)
		h.SubmitAction("h3", "pay.hold", s.ent, "b3", `{"order_id":"o-9","note":"thrice"}`)
		h.Decide(s.ks, "ok2", schemas.TypeApprove, s.ent, schemas.Decision{Key: "b2", Reason: "again", By: "ann"})
		until(h, seen, func() bool {
			return len(seen["h1"]) > 1 && len(seen["h2"]) > 2 && len(seen["ok"]) > 1 &&
				len(seen["h3"]) > 0 && len(seen["ok2"]) > 0 && len(seen["slow"]) > 0
		})
		kafkatest.OneOutcomeEach(t, seen, []string{"h1", "ok"})
		answersOf(t, seen, "h2", schemas.StatusHeld, schemas.StatusSucceeded)
		for _, o := range seen["ok"] {
			if o.Record.Status != schemas.StatusSucceeded || string(o.Record.Result) != `{"approved":"b2","status":"succeeded"}` {
				t.Errorf("the approval, consumed again: %s %s %s, want its first answer (applied)", o.Record.Status, code(o), o.Record.Result)
			}
		}
		if o := seen["h3"][0]; o.Record.Status != schemas.StatusHeld {
			t.Errorf("h3, a later duplicate: %s %s, want held", o.Record.Status, code(o))
		}
		if o := seen["ok2"][0]; code(o) != schemas.CodeNotUnresolved {
			t.Errorf("a second approval of b2: %s %s, want rejected %s", o.Record.Status, code(o), schemas.CodeNotUnresolved)
		}
		for key, want := range map[string]int{"b1": 1, "b2": 1, "b3": 0} {
			if n := s.svc.effects(key); n != want {
				t.Errorf("%s took effect %d times at the service, want %d", key, n, want)
			}
		}
		h.Audit()
		auditCatches(t, h, seen["ok"][0], schemas.StatusRejected, schemas.CodeNotUnresolved)
	})
}

// TestResolutionConsumedAgain: u1's POST answers 500 and the action has
// no confirm_url, so it is unresolved; an operator resolves it as
// rejected. Consumed again after the handover, u1 and the resolution get
// their answers again (no second POST, the resolution not refused), a
// later command with the key is answered from the resolved record — an
// operator's rejection is final for the key, it does not execute — and a
// second resolution is refused.
func TestResolutionConsumedAgain(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	eachHandover(t, true, `actions:
  pay.ask:
    connector: http
    url: %[1]s/pay
    timeout: 2s
`, func(t *testing.T, s *sibling, how string) {
		h, seen := s.h, s.seen
		h.SubmitAction("u1", "pay.ask", s.ent, "u", `{"amount":1}`)
		h.Outcomes(1, seen, nil)
		if o := seen["u1"][0]; o.Record.Status != schemas.StatusUnresolved {
			t.Fatalf("u1: %s %s, want unresolved", o.Record.Status, code(o))
		}
		h.Decide(s.ks, "res", schemas.TypeResolve, s.ent, schemas.Decision{Key: "u", As: "rejected", Reason: "the bank refused it", By: "ann"})
		h.Outcomes(3, seen, nil) // the resolution's answer and u1's settlement
		s.o.handOver(how)
		h.SubmitAction("u2", "pay.ask", s.ent, "u", `{"amount":1}`)
		h.Decide(s.ks, "res2", schemas.TypeResolve, s.ent, schemas.Decision{Key: "u", As: "succeeded", Reason: "changed my mind", By: "bob"})
		until(h, seen, func() bool {
			return len(seen["u1"]) > 2 && len(seen["res"]) > 1 && len(seen["u2"]) > 0 && len(seen["res2"]) > 0 && len(seen["slow"]) > 0
		})
		answersOf(t, seen, "u1", schemas.StatusUnresolved, schemas.StatusRejected)
		kafkatest.OneOutcomeEach(t, seen, []string{"res"})
		if o := seen["res"][0]; o.Record.Status != schemas.StatusSucceeded {
			t.Errorf("the resolution: %s %s, want succeeded", o.Record.Status, code(o))
		}
		if o := seen["u2"][0]; o.Record.Status != schemas.StatusRejected || !o.Replayed || o.Record.Resolution == nil {
			t.Errorf("u2, after the key was resolved rejected: %s %s replayed=%v resolution=%v, want the resolved record replayed",
				o.Record.Status, code(o), o.Replayed, o.Record.Resolution)
		}
		if o := seen["res2"][0]; code(o) != schemas.CodeNotUnresolved {
			t.Errorf("a second resolution: %s %s, want rejected %s", o.Record.Status, code(o), schemas.CodeNotUnresolved)
		}
		if n := s.svc.effects("u"); n != 1 {
			t.Errorf("u was POSTed %d times, want 1", n)
		}
		h.Audit()
		auditCatches(t, h, seen["res"][0], schemas.StatusRejected, schemas.CodeNotUnresolved)
	})
}

// TestReconcilerConfirmationConsumedAgain: r1's POST answers 500 after
// applying and its confirm_url is down, so it is unresolved; once the
// confirm endpoint answers, the reconciler settles it succeeded. Consumed
// again after the handover — r1 and the reconciler's requests — r1 gets
// its settlement again, nothing is POSTed a second time, and a later
// command with the key is a replay.
func TestReconcilerConfirmationConsumedAgain(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	eachHandover(t, true, `reconcile:
  every: 300ms
actions:
  pay.confirm:
    connector: http
    url: %[1]s/pay
    confirm_url: %[1]s/pay/{key}
    timeout: 300ms
    confirm_timeout: 600ms
`, func(t *testing.T, s *sibling, how string) {
		h, seen := s.h, s.seen
		h.SubmitAction("r1", "pay.confirm", s.ent, "r", `{"amount":1}`)
		h.Outcomes(1, seen, nil)
		if o := seen["r1"][0]; o.Record.Status != schemas.StatusUnresolved {
			t.Fatalf("r1: %s %s, want unresolved", o.Record.Status, code(o))
		}
		s.svc.confirmable.Store(true)
		h.Outcomes(2, seen, nil) // the reconciler's settlement
		if o := seen["r1"][1]; o.Record.Status != schemas.StatusSucceeded || o.Record.EstablishedBy != schemas.EstablishedByReconciler {
			t.Fatalf("r1's settlement: %s %s established by %s, want succeeded by the reconciler", o.Record.Status, code(o), o.Record.EstablishedBy)
		}
		s.o.handOver(how)
		h.SubmitAction("r2", "pay.confirm", s.ent, "r", `{"amount":1}`)
		until(h, seen, func() bool { return len(seen["r1"]) > 2 && len(seen["r2"]) > 0 && len(seen["slow"]) > 0 })
		answersOf(t, seen, "r1", schemas.StatusUnresolved, schemas.StatusSucceeded)
		if o := seen["r2"][0]; o.Record.Status != schemas.StatusSucceeded || !o.Replayed {
			t.Errorf("r2, after the confirmation: %s %s replayed=%v, want the settled record replayed", o.Record.Status, code(o), o.Replayed)
		}
		if n := s.svc.effects("r"); n != 1 {
			t.Errorf("r was POSTed %d times, want 1", n)
		}
		h.Audit()
		auditCatches(t, h, seen["r1"][len(seen["r1"])-1], schemas.StatusFailed, schemas.CodeConnectorUnavailable)
	})
}
