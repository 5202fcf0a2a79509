package decide

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// TestOperatorRows: every row of the operator decision table.
func TestOperatorRows(t *testing.T) {
	decision := func(typ string, d schemas.Decision) schemas.Command {
		data, _ := json.Marshal(d)
		return schemas.Command{ID: "d1", Type: typ, Subject: "order-1", IdempotencyKey: typ + "/d1", Data: data}
	}
	ok := schemas.Decision{Key: "k1", Reason: "checked", By: "ann", As: "succeeded"}
	target := func(st schemas.Status, decidedBy string) *schemas.Record {
		r := &schemas.Record{IdempotencyKey: "k1", Entity: "order-1", Action: "pay", Status: st}
		if decidedBy != "" {
			r.Resolution = &schemas.Resolution{As: "approved", DecisionID: decidedBy}
		}
		return r
	}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	until := func(d schemas.Decision, at time.Time) schemas.Decision { d.NotAfter = at; return d }
	stale, fresh := until(ok, now.Add(-time.Second)), until(ok, now.Add(time.Hour))
	hit := map[string]bool{}
	for _, tc := range []struct {
		name string
		in   DecisionInput
		row  string
		verd Verdict
		code string
	}{
		{"unsigned", DecisionInput{Cmd: decision(schemas.TypeResolve, ok), SignatureErr: schemas.ErrNotSigned}, "refused", Reject, schemas.CodeNotAllowed},
		{"no key configured", DecisionInput{Cmd: decision(schemas.TypeRelease, ok), SignatureErr: schemas.ErrNoControlKeys}, "refused", Reject, schemas.CodeNotAllowed},
		{"no reason", DecisionInput{Cmd: decision(schemas.TypeApprove, schemas.Decision{Key: "k1"})}, "malformed", Reject, schemas.CodeInvalidCommand},
		{"resolve as held", DecisionInput{Cmd: decision(schemas.TypeResolve, schemas.Decision{Key: "k1", Reason: "r", As: "held"})}, "malformed", Reject, schemas.CodeInvalidCommand},
		{"target not looked up", DecisionInput{Cmd: decision(schemas.TypeResolve, ok)}, "target-lookup", LookUpTarget, ""},
		{"approve applied, in progress", DecisionInput{Cmd: decision(schemas.TypeApprove, ok), TargetKnown: true, Target: target(schemas.StatusInProgress, "d1")}, "applied", Applied, ""},
		{"approve applied, past its not_after", DecisionInput{Cmd: decision(schemas.TypeApprove, stale), Now: now, TargetKnown: true, Target: target(schemas.StatusInProgress, "d1")}, "applied", Applied, ""},
		{"approve applied, settled", DecisionInput{Cmd: decision(schemas.TypeApprove, ok), TargetKnown: true, Target: target(schemas.StatusSucceeded, "d1")}, "applied", Applied, ""},
		{"approve of a record another approval settled", DecisionInput{Cmd: decision(schemas.TypeApprove, ok), TargetKnown: true, Target: target(schemas.StatusSucceeded, "d0"), ActionConfigured: true}, "not-applicable", Reject, schemas.CodeNotUnresolved},
		{"resolve past its not_after", DecisionInput{Cmd: decision(schemas.TypeResolve, stale), Now: now, TargetKnown: true, Target: target(schemas.StatusUnresolved, "")}, "expired", Reject, schemas.CodeExpired},
		{"approve past its not_after", DecisionInput{Cmd: decision(schemas.TypeApprove, stale), Now: now, TargetKnown: true, Target: target(schemas.StatusHeld, ""), ActionConfigured: true}, "expired", Reject, schemas.CodeExpired},
		{"release past its not_after", DecisionInput{Cmd: decision(schemas.TypeRelease, stale), Now: now, TargetKnown: true, Target: target(schemas.StatusSucceeded, "")}, "expired", Reject, schemas.CodeExpired},
		{"no record", DecisionInput{Cmd: decision(schemas.TypeResolve, ok), TargetKnown: true}, "not-applicable", Reject, schemas.CodeNotUnresolved},
		{"resolve of succeeded", DecisionInput{Cmd: decision(schemas.TypeResolve, ok), TargetKnown: true, Target: target(schemas.StatusSucceeded, "")}, "not-applicable", Reject, schemas.CodeNotUnresolved},
		{"release of unresolved", DecisionInput{Cmd: decision(schemas.TypeRelease, ok), TargetKnown: true, Target: target(schemas.StatusUnresolved, "")}, "not-applicable", Reject, schemas.CodeNotUnresolved},
		{"approve, action gone", DecisionInput{Cmd: decision(schemas.TypeApprove, ok), TargetKnown: true, Target: target(schemas.StatusHeld, "")}, "action-gone", Reject, schemas.CodeUnknownAction},
		{"resolve of unresolved", DecisionInput{Cmd: decision(schemas.TypeResolve, ok), TargetKnown: true, Target: target(schemas.StatusUnresolved, "")}, "resolve", Resolve, ""},
		{"resolve of held", DecisionInput{Cmd: decision(schemas.TypeResolve, ok), TargetKnown: true, Target: target(schemas.StatusHeld, "")}, "resolve", Resolve, ""},
		{"approve of held", DecisionInput{Cmd: decision(schemas.TypeApprove, ok), TargetKnown: true, Target: target(schemas.StatusHeld, ""), ActionConfigured: true}, "approve", Approve, ""},
		{"resolve before its not_after", DecisionInput{Cmd: decision(schemas.TypeResolve, fresh), Now: now, TargetKnown: true, Target: target(schemas.StatusUnresolved, "")}, "resolve", Resolve, ""},
		{"resolve at its not_after", DecisionInput{Cmd: decision(schemas.TypeResolve, until(ok, now)), Now: now, TargetKnown: true, Target: target(schemas.StatusUnresolved, "")}, "resolve", Resolve, ""},
		{"resolve without not_after (an earlier build's)", DecisionInput{Cmd: decision(schemas.TypeResolve, ok), Now: now, TargetKnown: true, Target: target(schemas.StatusUnresolved, "")}, "resolve", Resolve, ""},
		{"release of rejected", DecisionInput{Cmd: decision(schemas.TypeRelease, ok), TargetKnown: true, Target: target(schemas.StatusRejected, "")}, "release", Release, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Operator(tc.in)
			wantRow(t, d.Decision, tc.row, tc.verd, tc.code)
			if d.Verdict == Reject && (!d.Journal || d.Message == "") {
				t.Fatalf("a refused decision is answered with a message and journaled: %+v", d)
			}
			if d.Verdict != Reject && d.Req.Key != "k1" {
				t.Fatalf("decision data not parsed: %+v", d.Req)
			}
			if d.Row == "expired" && !strings.Contains(d.Message, "not_after 2026-12-07T11:59:59Z") {
				t.Fatalf("an expired decision's message names its not_after: %q", d.Message)
			}
			hit[d.Row] = true
		})
	}
	covered(t, DecisionRows, hit)
}

// TestOperatorNotAfterMalformed: a not_after that is not an RFC 3339 time
// makes the decision malformed, not one without expiry.
func TestOperatorNotAfterMalformed(t *testing.T) {
	for _, na := range []string{`"tomorrow"`, `1765108800`, `""`} {
		c := schemas.Command{ID: "d1", Type: schemas.TypeRelease, Subject: "order-1", IdempotencyKey: "release/d1",
			Data: json.RawMessage(`{"key":"k1","reason":"r","by":"ann","not_after":` + na + `}`)}
		d := Operator(DecisionInput{Cmd: c, Now: time.Now()})
		wantRow(t, d.Decision, "malformed", Reject, schemas.CodeInvalidCommand)
	}
}

// BenchmarkOperator: deciding a resolve of an unresolved record, its data
// without not_after (an earlier build's) and with it: the price of the
// expiry is parsing one RFC 3339 time, on control commands only.
func BenchmarkOperator(b *testing.B) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	target := &schemas.Record{IdempotencyKey: "k1", Entity: "order-1", Action: "pay", Status: schemas.StatusUnresolved}
	for name, d := range map[string]schemas.Decision{
		"legacy":    {Key: "k1", Reason: "checked", By: "ann", As: "succeeded"},
		"not_after": {Key: "k1", Reason: "checked", By: "ann", As: "succeeded", NotAfter: now.Add(time.Hour)},
	} {
		data, _ := json.Marshal(d)
		in := DecisionInput{Cmd: schemas.Command{ID: "d1", Type: schemas.TypeResolve, Subject: "order-1", IdempotencyKey: "resolve/d1", Data: data},
			TargetKnown: true, Target: target, Now: now}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if Operator(in).Verdict != Resolve {
					b.Fatal("not resolved")
				}
			}
		})
	}
}
