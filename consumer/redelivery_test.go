package consumer_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// slowService is the fake external system (apifake.Effects) answering
// POSTs 201 at once, except the first request of each key in block, which
// it holds without applying until the executor gives up on it: an
// execution in flight across a stop. After holdUntilRelease it holds
// every request of those keys, not only the first, until release.
type slowService struct {
	*apifake.Effects
	arrived           chan string
	holdAll, released atomic.Bool
}

// newSlowService starts it and returns its URL.
func newSlowService(t *testing.T, block ...string) (*slowService, string) {
	held := map[string]bool{}
	for _, k := range block {
		held[k] = true
	}
	s := &slowService{arrived: make(chan string, 16)}
	s.Effects = apifake.NewEffects(t, apifake.WithScript(func(key string, n int) apifake.Fault {
		if held[key] && (n == 1 || s.holdAll.Load() && !s.released.Load()) {
			if n == 1 {
				s.arrived <- key
			}
			return apifake.Fault{Before: true, Hang: true}
		}
		return apifake.None
	}))
	return s, s.URL("")
}

// holdUntilRelease has the service hold the later requests of its keys
// too, until release: an executor whose attempt reaches its deadline
// sends the key again (idempotent_by_key) and is held again, so that it
// cannot answer the command however long it runs.
func (s *slowService) holdUntilRelease() { s.holdAll.Store(true) }

// release ends holdUntilRelease: the next request of each key is answered.
func (s *slowService) release() { s.released.Store(true) }

func (s *slowService) wait(t *testing.T, key string) {
	t.Helper()
	select {
	case k := <-s.arrived:
		if k != key {
			t.Fatalf("request of %q held, want %q", k, key)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the request of %q never reached the service", key)
	}
}

// redeliveryYAML: noop.ping, and slow.call on the slow service, whose
// attempt outlasts the graceful stop (5s past RevokeTimeout) and which a
// new owner re-executes after the interrupted attempt's deadline
// (idempotent by key), so the command holding the watermark settles.
const redeliveryYAML = `actions:
  noop.ping:
    connector: noop
    effects_file: %[1]s
    timeout: 500ms
  slow.call:
    connector: http
    url: %[2]s
    timeout: 8s
    idempotent_by_key: true
%[3]s`

// stopQuickly: the graceful stop gives up on the held request soon, and
// leaves it in_progress for the next owner.
func stopQuickly(h *onceflighttest.Harness) {
	tune := h.Tune
	h.Tune = func(c *consumer.Config) {
		if tune != nil {
			tune(c)
		}
		c.RevokeTimeout = 100 * time.Millisecond
	}
}

// holdWatermark starts h's executor on a new data dir with the slow
// service, and a command "slow" of an entity on partition 0 held at the
// service: the partition's committed offset stays below every later
// command until it settles. It returns another entity of partition 0, the
// data dir and the service's URL.
func holdWatermark(t *testing.T, h *onceflighttest.Harness) (ent, dir, url string) {
	t.Helper()
	same, _ := entitiesOn(0, 2)
	svc, url := newSlowService(t, "kx")
	stopQuickly(h)
	h.UseConfig(fmt.Sprintf(redeliveryYAML, h.Effects, url, ""))
	dir = t.TempDir()
	h.Start(dir)
	h.SubmitAction("slow", "slow.call", same[0], "kx", `{}`)
	svc.wait(t, "kx")
	return same[1], dir, url
}

// until reads outcomes into seen until cond holds (60s per outcome).
func until(h *onceflighttest.Harness, seen map[string][]schemas.Outcome, cond func() bool) {
	total := 0
	for _, v := range seen {
		total += len(v)
	}
	for n := total; !cond(); n++ {
		h.Outcomes(n+1, seen, nil)
	}
}

// answeredAgain checks that every answer of command id has the error code
// of its first.
func answeredAgain(t *testing.T, seen map[string][]schemas.Outcome, id, want string) {
	t.Helper()
	for _, o := range seen[id] {
		if code(o) != want {
			t.Errorf("%s, consumed again: %s %s, want its first answer %s", id, o.Record.Status, code(o), want)
		}
	}
}

// executedOnce checks that o is a new execution, that its key took effect
// effects times in all, and the audit.
func executedOnce(t *testing.T, h *onceflighttest.Harness, o schemas.Outcome, what string, effects int) {
	t.Helper()
	if o.Record.Status != schemas.StatusSucceeded || o.Replayed {
		t.Errorf("%s: %s %s replayed=%v, want a new execution", what, o.Record.Status, code(o), o.Replayed)
	}
	if n := h.EffectsOf(o.Record.Entity, o.Record.IdempotencyKey); n != effects {
		t.Errorf("%s took effect %d times, want %d", o.Record.IdempotencyKey, n, effects)
	}
	h.Audit()
}

// TestReleaseDoesNotReArmRedeliveredCommands (issue 19): another entity's
// slow command holds partition 0's committed offset below c1; c1 executes,
// c1b reuses its key with other data, an operator releases the key, and
// the executor restarts (on its data dir, or on an empty one that restores
// from the journal) before the committed offset passes c1. c1, c1b and the
// release are consumed again: each gets its first answer — c1 does not
// execute again with its old data, c1b is still rejected — and c2, the
// command the release was for, executes.
func TestReleaseDoesNotReArmRedeliveredCommands(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	for _, restart := range []string{"same data dir", "empty data dir"} {
		t.Run(restart, func(t *testing.T) {
			h := onceflighttest.New(t)
			ks := withKeys(t, h)
			ent, dir, _ := holdWatermark(t, h)
			h.Submit("c1", ent, "k1", `{"amount":1}`)
			h.Submit("c1b", ent, "k1", `{"amount":2}`)
			h.Decide(ks, "rel", schemas.TypeRelease, ent, schemas.Decision{Key: "k1", Reason: "redo with the right amount", By: "ann"})
			seen := map[string][]schemas.Outcome{}
			h.Outcomes(3, seen, nil)
			if o := seen["rel"][0]; o.Record.Status != schemas.StatusSucceeded {
				t.Fatalf("release: %s %s", o.Record.Status, code(o))
			}
			h.Stop()
			if restart == "empty data dir" {
				dir = t.TempDir()
			}
			h.Start(dir)
			h.Submit("c2", ent, "k1", `{"amount":3}`)
			until(h, seen, func() bool {
				return len(seen["c2"]) > 0 && len(seen["c1"]) > 1 && len(seen["c1b"]) > 1 && len(seen["rel"]) > 1 && len(seen["slow"]) > 0
			})
			first := seen["c1"][0].Record.StartedAt
			for _, o := range seen["c1"] {
				if o.Record.Status != schemas.StatusSucceeded || o.Replayed || o.Record.Release != nil {
					t.Errorf("c1 answered %s replayed=%v release=%v, want its first answer (succeeded, not released)", o.Record.Status, o.Replayed, o.Record.Release)
				}
				if s := o.Record.StartedAt; s == nil || first == nil || !s.Equal(*first) {
					t.Errorf("c1 answered with an execution started at %v, want its first one (%v): it executed again", s, first)
				}
			}
			answeredAgain(t, seen, "c1b", schemas.CodeKeyReused)
			executedOnce(t, h, seen["c2"][0], "c2 (after the release)", 2)
		})
	}
}

// TestRefusalDoesNotBurnTheKey (issue 19): a command of an action not
// configured yet is rejected unknown_action; after the action is
// configured, a later command with the same key executes (the rejection
// never started anything), while the rejected command, consumed again,
// still gets its first answer.
func TestRefusalDoesNotBurnTheKey(t *testing.T) {
	h := onceflighttest.New(t)
	ent, dir, url := holdWatermark(t, h)
	h.SubmitAction("r1", "pay.new", ent, "kn", `{"amount":1}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	if o := seen["r1"][0]; code(o) != schemas.CodeUnknownAction {
		t.Fatalf("r1 before its action is configured: %s %s", o.Record.Status, code(o))
	}
	h.Stop()
	h.UseConfig(fmt.Sprintf(redeliveryYAML, h.Effects, url, fmt.Sprintf("  pay.new:\n    connector: noop\n    effects_file: %s\n", h.Effects)))
	h.Start(dir)
	h.SubmitAction("r2", "pay.new", ent, "kn", `{"amount":1}`)
	until(h, seen, func() bool { return len(seen["r2"]) > 0 && len(seen["r1"]) > 1 && len(seen["slow"]) > 0 })
	answeredAgain(t, seen, "r1", schemas.CodeUnknownAction)
	executedOnce(t, h, seen["r2"][0], "r2 (once the action is configured)", 1)
}

// TestRedeliveredApproveAnsweredApplied (issue 19): an approval's
// execution committed its intent, then the executor stopped before the
// approval was answered. Consumed again, the held command's execution is
// inherited (not started twice) and the approval is answered as applied,
// not rejected not_unresolved.
func TestRedeliveredApproveAnsweredApplied(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	for _, restart := range []string{"same data dir", "empty data dir"} {
		t.Run(restart, func(t *testing.T) {
			svc, url := newSlowService(t, "b2")
			h := onceflighttest.New(t)
			ks := withKeys(t, h)
			stopQuickly(h)
			h.UseConfig(fmt.Sprintf(`actions:
  pay.hold:
    connector: http
    url: %s
    timeout: 8s
    idempotent_by_key: true
    unique_by: [order_id]
    on_duplicate: hold
`, url))
			dir := t.TempDir()
			h.Start(dir)
			h.SubmitAction("h1", "pay.hold", "order-1", "b1", `{"order_id":"o-9"}`)
			h.SubmitAction("h2", "pay.hold", "order-1", "b2", `{"order_id":"o-9","note":"again"}`)
			seen := map[string][]schemas.Outcome{}
			h.Outcomes(2, seen, nil)
			if o := seen["h2"][0]; o.Record.Status != schemas.StatusHeld {
				t.Fatalf("h2: %s %s, want held", o.Record.Status, code(o))
			}
			h.Decide(ks, "ok", schemas.TypeApprove, "order-1", schemas.Decision{Key: "b2", Reason: "customer asked twice", By: "ann"})
			svc.wait(t, "b2")
			h.Stop()
			if restart == "empty data dir" {
				dir = t.TempDir()
			}
			h.Start(dir)
			until(h, seen, func() bool { return len(seen["ok"]) > 0 && len(seen["h2"]) > 1 })
			if o := seen["ok"][0]; o.Record.Status != schemas.StatusSucceeded || string(o.Record.Result) != `{"approved":"b2","status":"succeeded"}` {
				t.Errorf("the approval, consumed again after it took effect: %s %s %s, want succeeded (applied)", o.Record.Status, code(o), o.Record.Result)
			}
			if o := seen["h2"][len(seen["h2"])-1]; o.Record.Status != schemas.StatusSucceeded {
				t.Errorf("h2's settlement: %s %s", o.Record.Status, code(o))
			}
			kafkatest.OneOutcomeEach(t, map[string][]schemas.Outcome{"ok": seen["ok"]}, []string{"ok"})
			h.Audit()
		})
	}
}
