package audit

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// at sets the commands offset a journal entry's record answers.
func at(e jent, off int64) jent {
	r := *e.rec
	r.Command.Offset = off
	return jent{rec: &r}
}

// released is e's record released by the release command at offset off
// (nil: a release written before releases had a position).
func released(e jent, off *int64) jent {
	r := *e.rec
	r.Release = &schemas.Resolution{By: "ann", At: t0.Add(time.Hour), Reason: "redo", As: r.Status, Offset: off}
	return jent{rec: &r}
}

func rejected(e jent, code string) jent {
	r := *e.rec
	r.Status, r.Error = schemas.StatusRejected, &schemas.Error{Code: code, Message: "refused"}
	return jent{rec: &r}
}

func pos(off int64) *int64 { return &off }

// TestOncePerKeyPositions (docs/guarantees.md#decision-table): a release,
// or a rejection that is not final for the key, frees the key for the
// commands after its position only.
func TestOncePerKeyPositions(t *testing.T) {
	k1 := func(st schemas.Status, seq int64, off int64) jent {
		return at(rec("k1", ent, st, 1, seq, 0), off)
	}
	for _, tc := range []struct {
		name string
		ents []jent
		fail bool
	}{
		{"execution after the release", []jent{marker(1), k1(schemas.StatusInProgress, 1, 0), k1(schemas.StatusSucceeded, 0, 0),
			released(k1(schemas.StatusSucceeded, 0, 0), pos(5)), k1(schemas.StatusInProgress, 2, 6)}, false},
		{"execution of a command before the release", []jent{marker(1), k1(schemas.StatusInProgress, 1, 0), k1(schemas.StatusSucceeded, 0, 0),
			released(k1(schemas.StatusSucceeded, 0, 0), pos(5)), k1(schemas.StatusInProgress, 2, 0)}, true},
		{"release without a position (older journals)", []jent{marker(1), k1(schemas.StatusInProgress, 1, 0), k1(schemas.StatusSucceeded, 0, 0),
			released(k1(schemas.StatusSucceeded, 0, 0), nil), k1(schemas.StatusInProgress, 2, 0)}, false},
		{"retryable rejection, later command executes", []jent{marker(1), rejected(k1(schemas.StatusSucceeded, 0, 3), schemas.CodeUnknownAction),
			k1(schemas.StatusInProgress, 1, 4)}, false},
		{"retryable rejection, the rejected command executes", []jent{marker(1), rejected(k1(schemas.StatusSucceeded, 0, 3), schemas.CodeUnknownAction),
			k1(schemas.StatusInProgress, 1, 3)}, true},
		{"final rejection, later command executes", []jent{marker(1), rejected(k1(schemas.StatusSucceeded, 0, 3), schemas.CodeDuplicateBusinessKey),
			k1(schemas.StatusInProgress, 1, 4)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base(t)
			in.Journal = journal(t, pe, tc.ents...)
			c := find(Check(in), CheckOncePerKey)
			if c.OK == tc.fail {
				t.Fatalf("once_per_key ok=%v, want %v; violations %v", c.OK, !tc.fail, c.Violations)
			}
		})
	}
}

// TestOneAnswerPerCommand: a command consumed again gets its first
// answer; only an unresolved or held first answer may be followed by
// another (its settlement).
func TestOneAnswerPerCommand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second schemas.Status
		first  schemas.Status
		fail   bool
	}{
		{"republication", schemas.StatusSucceeded, schemas.StatusSucceeded, false},
		{"settlement of unresolved", schemas.StatusSucceeded, schemas.StatusUnresolved, false},
		{"settlement of held", schemas.StatusRejected, schemas.StatusHeld, false},
		{"executed after a rejection", schemas.StatusSucceeded, schemas.StatusRejected, true},
		{"rejected after an execution", schemas.StatusRejected, schemas.StatusSucceeded, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base(t)
			in.Outcomes = []*kgo.Record{
				outcome(t, "k1", ent, "cmd-k1", tc.first, pe, 0),
				outcome(t, "k2", ent, "cmd-k2", schemas.StatusSucceeded, pe, 1),
				outcome(t, "k1", ent, "cmd-k1", tc.second, pe, 2),
			}
			c := find(Check(in), CheckOncePerKey)
			if c.OK == tc.fail {
				t.Fatalf("once_per_key ok=%v, want %v; violations %v", c.OK, !tc.fail, c.Violations)
			}
		})
	}
}
