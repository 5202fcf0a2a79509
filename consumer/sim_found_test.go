package consumer_test

import (
	"encoding/json"
	"testing"

	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// submitExpecting produces a noop.ping command with an expectedversion.
func submitExpecting(t *testing.T, h *onceflighttest.Harness, id, entity, key, data string, version int64) {
	t.Helper()
	r, err := schemas.EncodeCommand(schemas.Command{ID: id, Source: "test", Type: "noop.ping", Subject: entity, IdempotencyKey: key,
		Data: json.RawMessage(data), ExpectedVersion: &version}, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	h.Produce(r)
}

// TestRedeliveredRejectionAfterLaterExecution (found by the simulation,
// seed 3): c1 is rejected version_conflict, a rejection that answers c1
// only, so c2 with the key and other data executes. The executor restarts
// before the committed offset passes c1 (another entity's slow command
// holds it). c1, consumed again, finds c2's record: before row
// answered-before it was answered again from it, rejected
// idempotency_key_reused — a second, different answer. Now it keeps its
// first answer, and c2 does not execute again.
func TestRedeliveredRejectionAfterLaterExecution(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	for _, restart := range []string{"same data dir", "empty data dir"} {
		t.Run(restart, func(t *testing.T) {
			h := onceflighttest.New(t)
			ent, dir, _ := holdWatermark(t, h)
			submitExpecting(t, h, "c1", ent, "k1", `{"amount":1}`, 5)
			h.Submit("c2", ent, "k1", `{"amount":2}`)
			seen := map[string][]schemas.Outcome{}
			h.Outcomes(2, seen, nil)
			if o := seen["c1"][0]; code(o) != schemas.CodeVersionConflict {
				t.Fatalf("c1: %s %s, want rejected version_conflict", o.Record.Status, code(o))
			}
			if o := seen["c2"][0]; o.Record.Status != schemas.StatusSucceeded || o.Replayed {
				t.Fatalf("c2: %s %s replayed=%v, want a new execution", o.Record.Status, code(o), o.Replayed)
			}
			h.Stop()
			if restart == "empty data dir" {
				dir = t.TempDir()
			}
			h.Start(dir)
			// c2 consumed again is republished; an answer of c1 consumed
			// again would precede it (one entity, partition order).
			until(h, seen, func() bool { return len(seen["c2"]) > 1 })
			answeredAgain(t, seen, "c1", schemas.CodeVersionConflict)
			executedOnce(t, h, seen["c2"][0], "c2", 1)
		})
	}
}

// TestRedeliveredReleaseAfterLaterExecution (the simulation's "seed 11"):
// c1 executes, a release frees k1, c2 executes k1 again with other data.
// The executor restarts before the committed offset passes c1. Consumed
// again, c1 is not answered from c2's record (it was replayed, or rejected
// idempotency_key_reused), and the release does not release c2's record:
// a later c3 with other data is rejected idempotency_key_reused, and k1
// took effect twice, not three times.
func TestRedeliveredReleaseAfterLaterExecution(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	for _, restart := range []string{"same data dir", "empty data dir"} {
		t.Run(restart, func(t *testing.T) {
			h := onceflighttest.New(t)
			ks := withKeys(t, h)
			ent, dir, _ := holdWatermark(t, h)
			h.Submit("c1", ent, "k1", `{"amount":1}`)
			h.Decide(ks, "rel", schemas.TypeRelease, ent, schemas.Decision{Key: "k1", Reason: "redo", By: "ann"})
			h.Submit("c2", ent, "k1", `{"amount":2}`)
			seen := map[string][]schemas.Outcome{}
			h.Outcomes(3, seen, nil)
			if o := seen["c2"][0]; o.Record.Status != schemas.StatusSucceeded || o.Replayed {
				t.Fatalf("c2 after the release: %s %s replayed=%v, want a new execution", o.Record.Status, code(o), o.Replayed)
			}
			h.Stop()
			if restart == "empty data dir" {
				dir = t.TempDir()
			}
			h.Start(dir)
			h.Submit("c3", ent, "k1", `{"amount":3}`)
			// c1, the release and c2 are consumed again before c3 (one
			// entity, partition order).
			until(h, seen, func() bool { return len(seen["c3"]) > 0 })
			for _, o := range seen["c1"] {
				if o.Record.Status != schemas.StatusSucceeded || o.Replayed || o.Record.Command.ID != "c1" {
					t.Errorf("c1 answered %s %s replayed=%v from %s's record, want its first answer", o.Record.Status, code(o), o.Replayed, o.Record.Command.ID)
				}
			}
			kafkatest.OneOutcomeEach(t, seen, []string{"c1", "rel", "c2"})
			if o := seen["c3"][0]; code(o) != schemas.CodeKeyReused {
				t.Errorf("c3 after the release was consumed again: %s %s, want rejected idempotency_key_reused (c2's record is not released)", o.Record.Status, code(o))
			}
			if n := h.EffectsOf(ent, "k1"); n != 2 {
				t.Errorf("k1 took effect %d times, want 2 (c1, and c2 after the release)", n)
			}
			h.Audit()
		})
	}
}
