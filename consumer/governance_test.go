package consumer_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// entitiesOn returns n entities placed on partition p (of 3) and one on
// another partition.
func entitiesOn(p int32, n int) (same []string, other string) {
	for i := 0; len(same) < n || other == ""; i++ {
		e := fmt.Sprintf("order-%d", i)
		if partitioner.ForEntity(e, 3) == p {
			if len(same) < n {
				same = append(same, e)
			}
		} else if other == "" {
			other = e
		}
	}
	return same, other
}

// withKeys configures the executor with a fresh control key and returns
// it for signing.
func withKeys(t *testing.T, h *onceflighttest.Harness) *schemas.ControlKeys {
	t.Helper()
	k, err := schemas.NewControlKey("ops-1")
	if err != nil {
		t.Fatal(err)
	}
	ks := &schemas.ControlKeys{Keys: []schemas.ControlKey{k}}
	h.Tune = func(c *consumer.Config) { c.ControlKeys = ks }
	return ks
}

func code(o schemas.Outcome) string {
	if o.Record.Error == nil {
		return ""
	}
	return o.Record.Error.Code
}

// TestKeyScopedToEntity (docs/events.md#execution-records): one key for entities on one partition
// and on another is an execution each; within an entity a reuse with other
// data is still rejected.
func TestKeyScopedToEntity(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	same, other := entitiesOn(0, 2)
	ents := append(same, other)
	// The first entity's execution is final before the others start, so
	// the others are not mistaken for repeats of it (by the executor or
	// by audit) however their records interleave.
	seen := map[string][]schemas.Outcome{}
	h.Submit("c0", ents[0], "k1", `{"amount":5}`)
	h.Outcomes(1, seen, nil)
	for i, e := range ents[1:] {
		h.Submit(fmt.Sprintf("c%d", i+1), e, "k1", `{"amount":5}`)
	}
	h.Submit("reuse", same[0], "k1", `{"amount":6}`)
	h.Outcomes(len(ents)+1, seen, nil)
	for i, e := range ents {
		o := seen[fmt.Sprintf("c%d", i)][0]
		if o.Record.Status != schemas.StatusSucceeded || o.Replayed || o.Record.Entity != e {
			t.Errorf("%s: %s replayed=%v %s, want a new succeeded execution", e, o.Record.Status, o.Replayed, code(o))
		}
		if n := h.EffectsOf(e, "k1"); n != 1 {
			t.Errorf("%s: k1 executed %d times, want 1", e, n)
		}
	}
	if o := seen["reuse"][0]; o.Record.Status != schemas.StatusRejected || code(o) != schemas.CodeKeyReused {
		t.Errorf("reuse within the entity: %s %s, want rejected %s", o.Record.Status, code(o), schemas.CodeKeyReused)
	}
	h.Audit()
}

const governanceYAML = `actions:
  pay.reject:
    connector: noop
    effects_file: %[1]s
    timeout: 500ms
    unique_by: [order_id, line.sku]
  pay.hold:
    connector: noop
    effects_file: %[1]s
    timeout: 500ms
    unique_by: [order_id]
    on_duplicate: hold
`

// TestUniqueByRejectAndHold (docs/configuration.md): two commands with one tuple in flight
// together → one executes; the other is rejected duplicate_business_key
// naming the first key, or held, then approved (executed once, second
// outcome) or resolved rejected. Decisions need a valid signature.
func TestUniqueByRejectAndHold(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(governanceYAML, h.Effects))
	ks := withKeys(t, h)
	h.Start(t.TempDir())

	h.SubmitAction("r1", "pay.reject", "order-1", "a1", `{"order_id":"o-1","line":{"sku":"x"},"amount":5}`)
	h.SubmitAction("r2", "pay.reject", "order-1", "a2", `{"amount":7,"order_id":"o-1","line":{"sku":"x"}}`)
	h.SubmitAction("r3", "pay.reject", "order-1", "a3", `{"order_id":"o-1","line":{"sku":"y"}}`) // other tuple
	h.SubmitAction("r4", "pay.reject", "order-2", "a4", `{"order_id":"o-1","line":{"sku":"x"}}`) // other entity
	h.SubmitAction("h1", "pay.hold", "order-1", "b1", `{"order_id":"o-9"}`)
	h.SubmitAction("h2", "pay.hold", "order-1", "b2", `{"order_id":"o-9","note":"again"}`)
	h.SubmitAction("h3", "pay.hold", "order-1", "b3", `{"order_id":"o-9","note":"thrice"}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(7, seen, nil)

	if o := seen["r2"][0]; o.Record.Status != schemas.StatusRejected || code(o) != schemas.CodeDuplicateBusinessKey || !strings.Contains(o.Record.Error.Message, `"a1"`) {
		t.Fatalf("r2: %s %+v, want rejected duplicate_business_key naming a1", o.Record.Status, o.Record.Error)
	}
	for _, c := range []string{"r1", "r3", "r4", "h1"} {
		if o := seen[c][0]; o.Record.Status != schemas.StatusSucceeded {
			t.Fatalf("%s: %s %s, want succeeded", c, o.Record.Status, code(o))
		}
	}
	for _, c := range []string{"h2", "h3"} {
		if o := seen[c][0]; o.Record.Status != schemas.StatusHeld || code(o) != schemas.CodeDuplicateBusinessKey {
			t.Fatalf("%s: %s %s, want held", c, o.Record.Status, code(o))
		}
	}
	if n := h.EffectsOf("order-1", "a2") + h.EffectsOf("order-1", "b2") + h.EffectsOf("order-1", "b3"); n != 0 {
		t.Fatalf("duplicates executed %d times", n)
	}

	// Forged approvals change nothing: unsigned, and signed with another
	// key under the same id.
	h.Decide(nil, "forged-1", schemas.TypeApprove, "order-1", schemas.Decision{Key: "b2", Reason: "r", By: "mallory"})
	bad, _ := schemas.NewControlKey("ops-1")
	h.Decide(&schemas.ControlKeys{Keys: []schemas.ControlKey{bad}}, "forged-2", schemas.TypeApprove, "order-1", schemas.Decision{Key: "b2", Reason: "r", By: "mallory"})
	// A valid signature for another entity does not reach order-1's record.
	h.Decide(ks, "cross", schemas.TypeApprove, "order-2", schemas.Decision{Key: "b2", Reason: "r", By: "ann"})
	// The same for resolve.
	h.Decide(nil, "forged-3", schemas.TypeResolve, "order-1", schemas.Decision{Key: "b3", As: "succeeded", Reason: "r", By: "mallory"})
	h.Decide(ks, "cross-resolve", schemas.TypeResolve, "order-2", schemas.Decision{Key: "b3", As: "succeeded", Reason: "r", By: "ann"})
	h.Outcomes(12, seen, nil)
	if o := seen["cross-resolve"][0]; o.Record.Status != schemas.StatusRejected || code(o) != schemas.CodeNotUnresolved {
		t.Fatalf("cross-entity resolve: %s %s, want rejected", o.Record.Status, code(o))
	}
	for _, c := range []string{"forged-1", "forged-2", "forged-3"} {
		if o := seen[c][0]; o.Record.Status != schemas.StatusRejected || code(o) != schemas.CodeNotAllowed {
			t.Fatalf("%s: %s %s, want rejected not_allowed", c, o.Record.Status, code(o))
		}
	}
	if o := seen["cross"][0]; o.Record.Status != schemas.StatusRejected || code(o) != schemas.CodeNotUnresolved {
		t.Fatalf("cross-entity approve: %s %s, want rejected", o.Record.Status, code(o))
	}
	if n := h.EffectsOf("order-1", "b2"); n != 0 {
		t.Fatalf("b2 executed %d times by forged or foreign approvals", n)
	}

	h.Decide(ks, "ok-approve", schemas.TypeApprove, "order-1", schemas.Decision{Key: "b2", Reason: "customer asked twice", By: "ann"})
	h.Decide(ks, "ok-reject", schemas.TypeResolve, "order-1", schemas.Decision{Key: "b3", As: "rejected", Reason: "duplicate", By: "ann"})
	// Approving again is refused: b2 is no longer held.
	h.Decide(ks, "again", schemas.TypeApprove, "order-1", schemas.Decision{Key: "b2", Reason: "again", By: "ann"})
	// approve: its own outcome + b2's second; resolve: its own + b3's; again.
	h.Outcomes(17, seen, nil)
	if o := seen["ok-approve"][0]; o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("approve: %s %s", o.Record.Status, code(o))
	}
	if got := seen["h2"]; len(got) != 2 || got[1].Record.Status != schemas.StatusSucceeded || got[1].Record.Resolution == nil || got[1].Record.Resolution.By != "ann" {
		t.Fatalf("h2 outcomes after approve: %+v", got)
	}
	if got := seen["h3"]; len(got) != 2 || got[1].Record.Status != schemas.StatusRejected {
		t.Fatalf("h3 outcomes after resolve --as rejected: %+v", got)
	}
	// A settlement's outcome id is (key, status, decision id), the
	// decision recorded in the record (docs/events.md#settlement).
	for id, decision := range map[string]string{"h2": "ok-approve", "h3": "ok-reject"} {
		o := seen[id][1]
		if r := o.Record.Resolution; r == nil || r.DecisionID != decision {
			t.Errorf("%s's settlement records decision %+v, want id %q", id, r, decision)
		}
		if want := schemas.OutcomeID(o.Record.IdempotencyKey, o.Record.Status, decision); o.ID != want {
			t.Errorf("%s's settlement outcome id %s, want %s (from the decision)", id, o.ID, want)
		}
	}
	if o := seen["again"][0]; o.Record.Status != schemas.StatusRejected || code(o) != schemas.CodeNotUnresolved {
		t.Fatalf("second approve: %s %s", o.Record.Status, code(o))
	}
	if n, m := h.EffectsOf("order-1", "b2"), h.EffectsOf("order-1", "b3"); n != 1 || m != 0 {
		t.Fatalf("b2 executed %d times (want 1), b3 %d (want 0)", n, m)
	}
	// How each status was established (docs/events.md#evidence): held by
	// rule; approved, then the connector's answer; resolved by the operator.
	wantEvidence(t, seen["h2"][0].Record, schemas.StatusHeld, schemas.EstablishedByRule, nil, "held, established by rule")
	wantEvidence(t, seen["h2"][1].Record, schemas.StatusSucceeded, schemas.EstablishedByAnswer,
		[]string{"attempt 1 succeeded"}, "attempt 1 → succeeded → succeeded, established by answer")
	if r := seen["h2"][1].Record.Resolution; r == nil || r.As != "approved" {
		t.Errorf("h2's execution does not record its approval: %+v", r)
	}
	wantEvidence(t, seen["h3"][1].Record, schemas.StatusRejected, schemas.EstablishedByOperator, nil,
		`resolved by ann: "duplicate" → rejected, established by operator`)
	h.Audit()
	auditWithKeys(t, h, ks) // h3's resolution names ok-reject, signed by ks

	// The unique_by index is a cache of the journal too: an executor with
	// an empty data dir still knows a1 holds the tuple, and that b3's
	// rejection freed nothing b2 holds.
	h.Stop()
	h.Start(t.TempDir())
	h.SubmitAction("r5", "pay.reject", "order-1", "a5", `{"order_id":"o-1","line":{"sku":"x"}}`)
	h.SubmitAction("h4", "pay.hold", "order-1", "b4", `{"order_id":"o-9"}`)
	h.Outcomes(19, seen, nil)
	if o := seen["r5"][0]; code(o) != schemas.CodeDuplicateBusinessKey || !strings.Contains(o.Record.Error.Message, `"a1"`) {
		t.Fatalf("r5 after data-dir loss: %s %+v", o.Record.Status, o.Record.Error)
	}
	if o := seen["h4"][0]; o.Record.Status != schemas.StatusHeld {
		t.Fatalf("h4 after data-dir loss: %s %s, want held", o.Record.Status, code(o))
	}
}

// TestDecisionsRefusedWithoutKey: an executor without a control key
// refuses every decision (docs/guarantees.md).
func TestDecisionsRefusedWithoutKey(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	k, _ := schemas.NewControlKey("ops-1")
	h.Decide(&schemas.ControlKeys{Keys: []schemas.ControlKey{k}}, "d1", schemas.TypeResolve, "order-1", schemas.Decision{Key: "k1", As: "failed", Reason: "r", By: "ann"})
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	if o := seen["d1"][0]; code(o) != schemas.CodeNotAllowed || !strings.Contains(o.Record.Error.Message, "keygen") {
		t.Fatalf("decision without a configured key: %s %+v", o.Record.Status, o.Record.Error)
	}
}

// TestReleaseMakesKeyNewWork (docs/events.md#execution-records Release): after a release the same
// key executes again; before it, a repeat is a replay.
func TestReleaseMakesKeyNewWork(t *testing.T) {
	h := onceflighttest.New(t)
	ks := withKeys(t, h)
	h.Start(t.TempDir())
	h.Submit("c1", "order-1", "k1", `{"amount":5}`)
	h.Submit("c2", "order-1", "k1", `{"amount":5}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	if !seen["c2"][0].Replayed {
		t.Fatalf("repeat before release not replayed: %+v", seen["c2"][0])
	}
	h.Decide(nil, "unsigned", schemas.TypeRelease, "order-1", schemas.Decision{Key: "k1", Reason: "redo", By: "mallory"})
	h.Decide(ks, "rel", schemas.TypeRelease, "order-1", schemas.Decision{Key: "k1", Reason: "refund must be redone", By: "ann"})
	h.Submit("c3", "order-1", "k1", `{"amount":7}`)
	h.Submit("c4", "order-1", "k1", `{"amount":7}`)
	h.Outcomes(6, seen, nil)
	if o := seen["unsigned"][0]; code(o) != schemas.CodeNotAllowed {
		t.Fatalf("unsigned release: %s %s", o.Record.Status, code(o))
	}
	if o := seen["rel"][0]; o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("release: %s %s", o.Record.Status, code(o))
	}
	if o := seen["c3"][0]; o.Record.Status != schemas.StatusSucceeded || o.Replayed || o.Record.Release != nil {
		t.Fatalf("command after release: %+v", o)
	}
	if o := seen["c4"][0]; !o.Replayed {
		t.Fatalf("repeat after the new execution not replayed: %+v", o)
	}
	if n := h.EffectsOf("order-1", "k1"); n != 2 {
		t.Fatalf("k1 executed %d times, want 2 (once before, once after the release)", n)
	}
	h.Audit()
}

// TestUniqueByWhileFirstInFlight: the second command with a tuple is
// consumed while the first one's request is at the service; it must not
// execute (the check and the execution are one step of the entity's single
// flight).
func TestUniqueByWhileFirstInFlight(t *testing.T) {
	h := onceflighttest.New(t)
	started, release := make(chan struct{}), make(chan struct{})
	// The first POST of a1 waits at the service (in flight, before its
	// effect) until released.
	svc := apifake.NewEffects(t, apifake.WithScript(func(key string, n int) apifake.Fault {
		if key == "a1" && n == 1 {
			close(started)
			<-release
		}
		return apifake.None
	}))
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer let() // before the service's cleanup, which waits for the held request
	h.UseConfig(fmt.Sprintf("actions:\n  pay.once:\n    connector: http\n    url: %s\n    timeout: 10s\n    unique_by: [order_id]\n", svc.URL("")))
	h.Start(t.TempDir())
	h.SubmitAction("c1", "pay.once", "order-1", "a1", `{"order_id":"o-1"}`)
	within(t, started, 30*time.Second, "a1's request at the service")
	h.SubmitAction("c2", "pay.once", "order-1", "a2", `{"order_id":"o-1"}`)
	let()
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	if o := seen["c1"][0]; o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("first: %s %s", o.Record.Status, code(o))
	}
	if o := seen["c2"][0]; code(o) != schemas.CodeDuplicateBusinessKey {
		t.Fatalf("second, consumed while the first was in flight: %s %s, want duplicate_business_key", o.Record.Status, code(o))
	}
	a1, _, _ := svc.Counts("a1")
	a2, _, _ := svc.Counts("a2")
	if len(a2) != 0 || len(a1) != 1 {
		t.Fatalf("posts: a1 %d, a2 %d, want a1 once and a2 never", len(a1), len(a2))
	}
	h.Audit()
}
