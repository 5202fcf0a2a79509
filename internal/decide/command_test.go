package decide

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// action is a configured action's policy for the table tests.
type action struct {
	denied  bool
	dataErr error
	fields  []string
	hold    bool
}

func (a action) SourceAllowed(string) bool            { return !a.denied }
func (a action) ValidateData(json.RawMessage) error   { return a.dataErr }
func (a action) Unique() (fields []string, hold bool) { return a.fields, a.hold }

var now = time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)

// TestCommandRows: every row of the decision table, each by an input that
// reaches it (and the rows before it do not).
func TestCommandRows(t *testing.T) {
	cmd := schemas.Command{ID: "c1", Source: "src", Type: "pay", Subject: "order-1", IdempotencyKey: "k1",
		Fingerprint: "sha256:a", Data: json.RawMessage(`{"order_id":"o-1"}`), Partition: 0, Offset: 10}
	record := func(st schemas.Status, fp string, finished time.Duration) *schemas.Record {
		r := &schemas.Record{IdempotencyKey: "k1", Entity: "order-1", Action: "pay", Status: st, Fingerprint: fp}
		if finished != 0 {
			f := now.Add(-finished)
			r.FinishedAt = &f
		}
		return r
	}
	with := func(f func(*schemas.Command)) schemas.Command { c := cmd; f(&c); return c }
	later := func(r *schemas.Record, p int32, off int64) *schemas.Record {
		r.Command = schemas.CommandRef{ID: "c2", Partition: p, Offset: off}
		return r
	}
	past, ahead, three := now.Add(-time.Second), now.Add(time.Second), int64(3)
	plain := action{}
	unique := action{fields: []string{"order_id"}}
	hit := map[string]bool{}
	for _, tc := range []struct {
		name string
		in   Input
		row  string
		verd Verdict
		code string
	}{
		{"record of a later command", Input{Cmd: cmd, Record: later(record(schemas.StatusSucceeded, "sha256:b", time.Minute), 0, 11), Action: plain}, "answered-before", Skip, ""},
		{"record of a later offset of another partition", Input{Cmd: cmd, Record: later(record(schemas.StatusSucceeded, "sha256:a", time.Minute), 1, 11), Keep: time.Hour, Action: plain}, "replay", Replay, ""},
		{"the record's own command consumed again", Input{Cmd: cmd, Record: later(record(schemas.StatusSucceeded, "sha256:a", time.Minute), 0, 10), Keep: time.Hour, Action: plain}, "replay", Replay, ""},
		{"the record's own command again, in progress", Input{Cmd: cmd, Record: later(record(schemas.StatusInProgress, "sha256:a", 0), 0, 10), Action: plain}, "inherit", Inherit, ""},
		{"other fingerprint", Input{Cmd: cmd, Record: record(schemas.StatusSucceeded, "sha256:b", time.Minute), Action: plain}, "key-reused", Reject, schemas.CodeKeyReused},
		{"other fingerprint in flight", Input{Cmd: cmd, ClaimedByOther: true, Action: plain}, "key-in-flight", Reject, schemas.CodeKeyReused},
		{"final beyond retention", Input{Cmd: cmd, Record: record(schemas.StatusSucceeded, "sha256:a", 2*time.Hour), Keep: time.Hour, Action: plain}, "key-expired", Reject, schemas.CodeKeyExpired},
		{"final without a finish time", Input{Cmd: cmd, Record: record(schemas.StatusSucceeded, "sha256:a", 0), Keep: time.Hour, Action: plain}, "replay", Replay, ""},
		{"final within retention", Input{Cmd: cmd, Record: record(schemas.StatusFailed, "sha256:a", time.Minute), Keep: time.Hour, Action: plain}, "replay", Replay, ""},
		{"a stub within retention (pruned under a shorter one)", Input{Cmd: cmd, Record: record(schemas.StatusSucceeded, "sha256:a", time.Minute), Keep: time.Hour, Stub: true, Action: plain}, "key-expired", Reject, schemas.CodeKeyExpired},
		{"a stub, retention forever", Input{Cmd: cmd, Record: record(schemas.StatusSucceeded, "sha256:a", time.Minute), Stub: true, Action: plain}, "key-expired", Reject, schemas.CodeKeyExpired},
		{"unresolved", Input{Cmd: cmd, Record: record(schemas.StatusUnresolved, "sha256:a", time.Minute), Action: plain}, "replay", Replay, ""},
		{"held", Input{Cmd: cmd, Record: record(schemas.StatusHeld, "sha256:a", 0), Keep: time.Nanosecond, Action: plain}, "replay", Replay, ""},
		{"in progress", Input{Cmd: cmd, Record: record(schemas.StatusInProgress, "sha256:a", 0), Action: plain}, "inherit", Inherit, ""},
		{"resolve", Input{Cmd: with(func(c *schemas.Command) { c.Type = schemas.TypeResolve })}, "control", Settle, ""},
		{"reconcile request", Input{Cmd: with(func(c *schemas.Command) { c.Type = schemas.TypeReconcile })}, "control", Settle, ""},
		{"deadline passed", Input{Cmd: with(func(c *schemas.Command) { c.Deadline = &past }), Action: plain}, "expired", Reject, schemas.CodeExpired},
		{"deadline ahead", Input{Cmd: with(func(c *schemas.Command) { c.Deadline = &ahead }), Action: plain}, "execute", Execute, ""},
		{"not configured", Input{Cmd: cmd}, "unknown-action", Reject, schemas.CodeUnknownAction},
		{"source refused", Input{Cmd: cmd, Action: action{denied: true}}, "source-not-allowed", Reject, schemas.CodeNotAllowed},
		{"schema", Input{Cmd: cmd, Action: action{dataErr: errors.New("amount: required")}}, "invalid-data", Reject, schemas.CodeInvalidCommand},
		{"expected version", Input{Cmd: with(func(c *schemas.Command) { c.ExpectedVersion = &three }), Version: 4, Action: plain}, "version-conflict", Reject, schemas.CodeVersionConflict},
		{"unique field missing", Input{Cmd: with(func(c *schemas.Command) { c.Data = json.RawMessage(`{}`) }), Action: unique}, "unique-field-missing", Reject, schemas.CodeInvalidCommand},
		{"unique holder unknown", Input{Cmd: cmd, Action: unique}, "unique-lookup", LookUpUnique, ""},
		{"unique tuple held", Input{Cmd: cmd, Action: unique, HolderKnown: true, Holder: "k0"}, "duplicate-rejected", Reject, schemas.CodeDuplicateBusinessKey},
		{"unique tuple held, hold", Input{Cmd: cmd, Action: action{fields: []string{"order_id"}, hold: true}, HolderKnown: true, Holder: "k0"}, "duplicate-held", Hold, schemas.CodeDuplicateBusinessKey},
		{"unique tuple free", Input{Cmd: cmd, Action: unique, HolderKnown: true}, "execute", Execute, ""},
		{"new work", Input{Cmd: with(func(c *schemas.Command) { c.ExpectedVersion = &three }), Version: 3, Action: plain}, "execute", Execute, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = now
			d := Command(tc.in)
			wantRow(t, d, tc.row, tc.verd, tc.code)
			if (d.Verdict == Reject || d.Verdict == Hold) && d.Message == "" {
				t.Fatal("a rejection without a message")
			}
			if d.Verdict == Reject && d.Journal == (tc.code == schemas.CodeKeyReused || tc.code == schemas.CodeKeyExpired) {
				t.Fatalf("journal=%v: only rejections about another command's key leave the key's record alone", d.Journal)
			}
			hit[d.Row] = true
		})
	}
	for _, tc := range []struct {
		name string
		d    Decision
		fits bool
		row  string
		verd Verdict
		code string
	}{
		{"execution's record too large", Decision{Row: "execute", Verdict: Execute}, false, "too-large", Reject, schemas.CodeTooLarge},
		{"held record too large", Decision{Row: "duplicate-held", Verdict: Hold, Code: schemas.CodeDuplicateBusinessKey}, false, "too-large", Reject, schemas.CodeTooLarge},
		{"execution's record fits", Decision{Row: "execute", Verdict: Execute}, true, "execute", Execute, ""},
		{"held record fits", Decision{Row: "duplicate-held", Verdict: Hold, Code: schemas.CodeDuplicateBusinessKey}, true, "duplicate-held", Hold, schemas.CodeDuplicateBusinessKey},
		{"a rejection is not measured", Decision{Row: "expired", Verdict: Reject, Code: schemas.CodeExpired}, false, "expired", Reject, schemas.CodeExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Sized(tc.d, tc.fits, 2<<20, 1<<20)
			wantRow(t, d, tc.row, tc.verd, tc.code)
			if d.Row == "too-large" && (!d.Journal || d.Message == "") {
				t.Fatalf("a too-large rejection is journaled, with a message: %+v", d)
			}
			hit[d.Row] = true
		})
	}
	covered(t, Rows, hit)
}

// wantRow checks that d was decided by row, with verdict v and code.
func wantRow(t *testing.T, d Decision, row string, v Verdict, code string) {
	t.Helper()
	if d.Row != row || d.Verdict != v || d.Code != code {
		t.Fatalf("got row %s %s %s (%s), want row %s %s %s", d.Row, d.Verdict, d.Code, d.Message, row, v, code)
	}
}

// covered checks that every row of a table was hit by a case: a row no
// case reaches is a row the table tests do not hold.
func covered(t *testing.T, rows []Row, hit map[string]bool) {
	t.Helper()
	for _, r := range rows {
		if !hit[r.Name] {
			t.Errorf("row %s is not covered by a case", r.Name)
		}
	}
}

// TestSeen: what a command sees of its key's record, by its position.
func TestSeen(t *testing.T) {
	five := int64(5)
	rec := func(mut func(*schemas.Record)) schemas.Record {
		r := schemas.Record{IdempotencyKey: "k1", Status: schemas.StatusSucceeded, Command: schemas.CommandRef{Partition: 1, Offset: 3}}
		mut(&r)
		return r
	}
	released := rec(func(r *schemas.Record) { r.Release = &schemas.Resolution{As: schemas.StatusSucceeded, Offset: &five} })
	oldRelease := rec(func(r *schemas.Record) { r.Release = &schemas.Resolution{As: schemas.StatusSucceeded} })
	refused := func(code string) schemas.Record {
		return rec(func(r *schemas.Record) { r.Status, r.Error = schemas.StatusRejected, &schemas.Error{Code: code} })
	}
	decided := rec(func(r *schemas.Record) {
		r.Status, r.Error = schemas.StatusRejected, &schemas.Error{Code: schemas.CodeUnknownAction}
		r.Resolution = &schemas.Resolution{As: schemas.StatusRejected}
	})
	for _, tc := range []struct {
		name  string
		rec   schemas.Record
		at    Position
		found bool
	}{
		{"released, command after the release", released, Position{1, 6}, false},
		{"released, command before the release", released, Position{1, 3}, true},
		{"released, at the release itself", released, Position{1, 5}, true},
		{"released without a position", oldRelease, Position{1, 3}, false},
		{"retryable rejection, later command", refused(schemas.CodeUnknownAction), Position{1, 4}, false},
		{"retryable rejection, the same command again", refused(schemas.CodeUnknownAction), Position{1, 3}, true},
		{"retryable rejection, an earlier command again", refused(schemas.CodeVersionConflict), Position{1, 2}, true},
		{"final rejection, later command", refused(schemas.CodeDuplicateBusinessKey), Position{1, 4}, true},
		{"operator's rejection, later command", decided, Position{1, 4}, true},
		{"succeeded, later command", rec(func(*schemas.Record) {}), Position{1, 9}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := Seen(tc.rec, true, tc.at)
			if found != tc.found {
				t.Fatalf("found=%v, want %v", found, tc.found)
			}
			if found && got.Release != nil {
				t.Fatal("a command before the release sees the record released")
			}
		})
	}
	if _, found := Seen(schemas.Record{}, false, Position{}); found {
		t.Fatal("no record seen as one")
	}
	// A decision naming the key (release of a rejected record) sees the
	// rejection: only later commands with the key see none.
	if _, found := Named(refused(schemas.CodeUnknownAction), true, Position{1, 4}); !found {
		t.Fatal("a decision after a rejection does not see the rejected record")
	}
	if _, found := Named(released, true, Position{1, 6}); found {
		t.Fatal("a decision after a release sees the released record")
	}
}
