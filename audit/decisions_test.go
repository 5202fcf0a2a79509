package audit

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// resolveCommand is a resolve of entity ent's key forKey as succeeded, at
// offset off of its partition, signed with ks (unsigned when nil).
func resolveCommand(t *testing.T, id, key, forKey string, off int64, ks *schemas.ControlKeys) *kgo.Record {
	t.Helper()
	return decisionCommand(t, schemas.TypeResolve, id, key, forKey, "succeeded", off, ks)
}

// decisionCommand is an operator decision of type typ with idempotency
// key key on entity ent's key forKey (as: resolve's verdict, "" for
// approve and release), at offset off, signed with ks (unsigned when nil).
func decisionCommand(t *testing.T, typ, id, key, forKey, as string, off int64, ks *schemas.ControlKeys) *kgo.Record {
	t.Helper()
	data, _ := json.Marshal(schemas.Decision{Key: forKey, As: as, Reason: "checked", By: "alice"})
	c := schemas.Command{ID: id, Source: "ops", Type: typ, Subject: ent, IdempotencyKey: key, Data: data}
	if ks != nil {
		if err := ks.SignControl(&c); err != nil {
			t.Fatal(err)
		}
	}
	r, err := schemas.EncodeCommand(c, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic, r.Partition, r.Offset = tops.Commands, pe, off
	return r
}

// opsKeys are the operators' keys and a forger's key of the same id.
func opsKeys(t *testing.T) (keys, forger *schemas.ControlKeys) {
	t.Helper()
	key, err := schemas.NewControlKey("ops")
	if err != nil {
		t.Fatal(err)
	}
	other, err := schemas.NewControlKey("ops")
	if err != nil {
		t.Fatal(err)
	}
	return &schemas.ControlKeys{Keys: []schemas.ControlKey{key}}, &schemas.ControlKeys{Keys: []schemas.ControlKey{other}}
}

// An accepted operator decision without a valid signature of a known key
// is a violation; one the executor refused is counted, not a violation;
// a signed one passes; without keys the check is left out and noted.
func TestDecisionsSigned(t *testing.T) {
	keys, forger := opsKeys(t)
	decision := func(id string, off int64, ks *schemas.ControlKeys) *kgo.Record {
		return resolveCommand(t, id, "resolve/k1/"+id, "k1", off, ks)
	}
	in := base(t)
	in.Commands = append(in.Commands,
		decision("d-signed", 2, keys),   // accepted, signed: fine
		decision("d-refused", 3, nil),   // unsigned, refused: counted
		decision("d-forged", 4, forger)) // accepted with another key's signature: violation
	in.Outcomes = append(in.Outcomes,
		outcome(t, "resolve/k1/d-signed", ent, "d-signed", schemas.StatusSucceeded, pe, 2),
		outcome(t, "resolve/k1/d-refused", ent, "d-refused", schemas.StatusRejected, pe, 3),
		outcome(t, "resolve/k1/d-forged", ent, "d-forged", schemas.StatusSucceeded, pe, 4))
	in.Committed[pe] = 5

	rep := Check(in)
	for _, c := range rep.Checks {
		if c.Name == CheckDecisionsSigned {
			t.Fatalf("checked without keys: %+v", c)
		}
	}
	if !hasNote(rep, "signatures were not checked") || rep.Counts.Decisions != 3 {
		t.Errorf("without keys: notes %v, decisions %d", rep.Notes, rep.Counts.Decisions)
	}

	in.ControlKeys = keys
	rep = Check(in)
	c := find(rep, CheckDecisionsSigned)
	if c.OK || c.Count != 1 || len(c.Violations) != 1 || !strings.Contains(c.Violations[0].Message, `"d-forged"`) {
		t.Fatalf("decisions_signed = %+v", c)
	}
	if rep.Counts.RefusedDecisions != 1 {
		t.Errorf("refused decisions %d, want 1", rep.Counts.RefusedDecisions)
	}
	for _, name := range []string{CheckHashChain, CheckAnswered, CheckOutcomeIDs, CheckOncePerKey, CheckSingleFlight} {
		if r := find(rep, name); !r.OK {
			t.Errorf("%s: %+v", name, r)
		}
	}
}

// A record established by an operator must name a signed decision on the
// commands topic that decided this key as this status (with the control
// keys): a journal record that claims an operator's resolution nobody
// signed, or borrows another key's decision, fails the evidence check.
func TestOperatorEvidenceNamesItsDecision(t *testing.T) {
	keys, forger := opsKeys(t)
	resolveCmd := func(id, forKey string, ks *schemas.ControlKeys) *kgo.Record {
		return resolveCommand(t, id, "resolve/"+id, forKey, 2, ks)
	}
	ambiguous := schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: 1, At: t0, Answer: schemas.AnswerAmbiguous, Detail: "HTTP 500"}
	// setup: k1 resolved as succeeded by an operator whose decision id is
	// named; the decision command (offset 2) and its outcome.
	setup := func(named string, decision *kgo.Record) Input {
		in := base(t)
		k1 := rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0)
		k1.rec.EstablishedBy, k1.rec.Evidence = schemas.EstablishedByOperator, []schemas.Evidence{ambiguous}
		k1.rec.Resolution = &schemas.Resolution{By: "alice", At: t0, Reason: "checked", As: schemas.StatusSucceeded, DecisionID: named}
		in.Journal = journal(t, pe, marker(1),
			rec("k1", ent, schemas.StatusInProgress, 1, 1, 0), k1,
			rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second),
			rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Second))
		return withDecision(t, in, decision, keys)
	}
	for _, tt := range []struct {
		name    string
		in      Input
		problem string // "" = the evidence check holds
		signed  bool   // decisions_signed holds
	}{
		{"its signed decision", setup("d-1", resolveCmd("d-1", "k1", keys)), "", true},
		{"no such decision", setup("d-9", resolveCmd("d-1", "k1", keys)), `decision "d-9" is not on the commands topic`, true},
		{"no decision at all", setup("d-1", nil), `decision "d-1" is not on the commands topic`, true},
		{"another key's decision", setup("d-1", resolveCmd("d-1", "k2", keys)), `decision "d-1" decided another key, entity or status`, true},
		{"a forged decision", setup("d-1", resolveCmd("d-1", "k1", forger)), `the signature of its decision "d-1" does not verify`, false},
		{"deleted by retention", func() Input {
			in := setup("d-1", nil)
			in.CommandsStart = map[int32]int64{pe: 2}
			in.Commands = nil
			in.Committed = map[int32]int64{}
			return in
		}(), "", true},
		{"without keys", func() Input { in := setup("d-9", nil); in.ControlKeys = nil; return in }(), "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := Check(tt.in)
			c := find(rep, CheckEvidence)
			switch {
			case tt.problem == "" && !c.OK:
				t.Errorf("evidence failed: %v", c.Violations)
			case tt.problem != "" && (c.OK || c.Count != 1 || c.Violations[0].Offset != 2 ||
				!strings.Contains(c.Violations[0].Message, "succeeded established by operator, but") || !strings.Contains(c.Violations[0].Message, tt.problem)):
				t.Errorf("evidence = %+v, want one violation at offset 2 saying %q", c, tt.problem)
			}
			if d := find(rep, CheckDecisionsSigned); tt.in.ControlKeys != nil && d.OK != tt.signed {
				t.Errorf("decisions_signed ok=%v, want %v: %v", d.OK, tt.signed, d.Violations)
			}
			if tt.name == "deleted by retention" && !hasNote(rep, "commands partition") {
				t.Errorf("no retention note: %v", rep.Notes)
			}
		})
	}
}

// A release frees a key for new work and an approval runs a held command:
// with the control keys, a record that carries either must name a signed
// decision of that kind for its key, as a resolution must (a release
// nobody signed would let the key execute again unnoticed).
func TestReleaseAndApprovalNameTheirDecision(t *testing.T) {
	keys, _ := opsKeys(t)
	// setup: k1 succeeded (by answer) and then released (or, approve:
	// its records carry an approval), naming decision d-1; decision is
	// the command at offset 2, if any.
	setup := func(approve bool, decision *kgo.Record) Input {
		in := base(t)
		k1a, k1b := rec("k1", ent, schemas.StatusInProgress, 1, 1, 0), rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0)
		ents := []jent{marker(1), k1a, k1b}
		if approve {
			for _, j := range []jent{k1a, k1b} {
				j.rec.Resolution = &schemas.Resolution{By: "alice", At: t0, Reason: "not a duplicate", As: "approved", DecisionID: "d-1"}
			}
		} else {
			off := int64(2)
			rel := rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0)
			rel.rec.Release = &schemas.Resolution{By: "alice", At: t0, Reason: "run again", As: schemas.StatusSucceeded, DecisionID: "d-1", Offset: &off}
			ents = append(ents, rel)
		}
		ents = append(ents, rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second), rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Second))
		in.Journal = journal(t, pe, ents...)
		return withDecision(t, in, decision, keys)
	}
	for _, tt := range []struct {
		name    string
		in      Input
		problem string // "" = the evidence check holds
	}{
		{"a release with its signed decision", setup(false, decisionCommand(t, schemas.TypeRelease, "d-1", "release/d-1", "k1", "", 2, keys)), ""},
		{"a release without a decision", setup(false, nil), `released by an operator, but its decision "d-1" is not on the commands topic`},
		{"a release naming an approval", setup(false, decisionCommand(t, schemas.TypeApprove, "d-1", "approve/d-1", "k1", "", 2, keys)), `decided another key, entity or status`},
		{"a release naming another key's release", setup(false, decisionCommand(t, schemas.TypeRelease, "d-1", "release/d-1", "k2", "", 2, keys)), `decided another key, entity or status`},
		{"an approval with its signed decision", setup(true, decisionCommand(t, schemas.TypeApprove, "d-1", "approve/d-1", "k1", "", 2, keys)), ""},
		{"an approval without a decision", setup(true, nil), `approved by an operator, but its decision "d-1" is not on the commands topic`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if c := find(Check(tt.in), CheckEvidence); c.OK != (tt.problem == "") || (!c.OK && !strings.Contains(c.Violations[0].Message, tt.problem)) {
				t.Errorf("evidence = %+v, want ok=%v saying %q", c, tt.problem == "", tt.problem)
			}
		})
	}
}

// withDecision is in with the control keys and decision d-1 (if any) at
// commands offset 2, accepted (a succeeded outcome) and committed.
func withDecision(t *testing.T, in Input, decision *kgo.Record, keys *schemas.ControlKeys) Input {
	t.Helper()
	if decision != nil {
		in.Commands = append(in.Commands, decision)
		in.Outcomes = append(in.Outcomes, outcome(t, "decision/d-1", ent, "d-1", schemas.StatusSucceeded, pe, 2))
		in.Committed[pe] = 3
	}
	in.ControlKeys = keys
	return in
}
