package audit

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// publish is the outcome event the executor publishes for the journal
// record at offset off of js (its bytes as they were journaled), answering
// causation, at outcomes offset at of the record's partition.
func publish(t *testing.T, js []*kgo.Record, off int64, causation string, replayed bool, at int64) *kgo.Record {
	t.Helper()
	for _, j := range js {
		if j.Offset != off {
			continue
		}
		rc, err := schemas.UnmarshalRecord(j.Value)
		if err != nil {
			t.Fatal(err)
		}
		r := wire.EncodeOutcomeData(&rc, j.Value, causation, replayed)
		r.Topic, r.Partition, r.Offset = tops.Outcomes, j.Partition, at
		return r
	}
	t.Fatalf("no journal offset %d", off)
	return nil
}

// linkOutcomes makes the outcomes the outcome helper built (a record
// without a hash) carry the journal record they stand for, as the
// executor publishes it: the latest record of their entity and key with
// their status, on its partition. It reports whether every such outcome
// found its record; if one does not (an outcome with another status than
// its record, a record deleted), the outcomes are left as they are and
// the cases of the other checks leave outcomes_match out of what they
// assert.
func linkOutcomes(t *testing.T, in *Input) bool {
	t.Helper()
	type kst struct{ entity, key, status string }
	latest := map[kst]*kgo.Record{}
	for _, j := range sorted(in.Journal) {
		if k, _ := header(j, schemas.HeaderKind); k != schemas.KindRecord {
			continue
		}
		rc, err := schemas.UnmarshalRecord(j.Value)
		if err != nil {
			continue
		}
		latest[kst{rc.Entity, rc.IdempotencyKey, string(rc.Status)}] = j
	}
	linked := slices.Clone(in.Outcomes)
	for i, r := range linked {
		o, err := schemas.DecodeOutcome(r)
		if err != nil || o.Record.Hash != "" {
			continue
		}
		j, ok := latest[kst{o.Record.Entity, o.Record.IdempotencyKey, string(o.Record.Status)}]
		if !ok {
			return false // left as they are
		}
		linked[i] = publish(t, []*kgo.Record{j}, j.Offset, o.CausationID, o.Replayed, r.Offset)
	}
	in.Outcomes = linked
	return true
}

// matchHistory is a healthy history whose outcomes are the executor's:
// k1 executed and succeeded, answered, then repeated (cmd-k1b, answered
// from the record); k2 executed and failed, answered.
func matchHistory(t *testing.T) Input {
	js := journal(t, pe,
		marker(1),
		rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
		rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
		rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second),
		rec("k2", ent, schemas.StatusFailed, 1, 0, 2*time.Second),
	)
	return Input{
		Topics:            tops,
		CommandPartitions: nParts,
		Commands: []*kgo.Record{command(t, "cmd-k1", ent, "k1", pe, 0), command(t, "cmd-k1b", ent, "k1", pe, 1),
			command(t, "cmd-k2", ent, "k2", pe, 2)},
		Journal: js,
		Outcomes: []*kgo.Record{
			publish(t, js, 2, "cmd-k1", false, 0),
			publish(t, js, 2, "cmd-k1b", true, 1),
			publish(t, js, 4, "cmd-k2", false, 2),
		},
		Committed:     map[int32]int64{pe: 3},
		MaxViolations: 20,
	}
}

// editOutcome replaces the value of outcome at with f applied to it.
func editOutcome(t *testing.T, in *Input, at int64, f func([]byte) []byte) {
	t.Helper()
	for i, r := range in.Outcomes {
		if r.Offset == at {
			cp := *r
			cp.Value = f(slices.Clone(r.Value))
			in.Outcomes[i] = &cp
			return
		}
	}
	t.Fatalf("no outcome at %d", at)
}

// reseal is the journal record r with f applied to it, sealed again: a
// record changed by someone who recomputes its hash.
func reseal(t *testing.T, r *kgo.Record, f func(*schemas.Record)) *kgo.Record {
	t.Helper()
	rc, err := schemas.UnmarshalRecord(r.Value)
	if err != nil {
		t.Fatal(err)
	}
	f(&rc)
	raw, err := wire.SealRecord(&rc)
	if err != nil {
		t.Fatal(err)
	}
	cp := *r
	cp.Value = raw
	return &cp
}

// TestOutcomesMatchJournal (round 24): every outcome states what the
// journal states. On main (cfbc2a8) every failing case here passed the
// audit: nothing compared an outcome with the journal.
func TestOutcomesMatchJournal(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*testing.T, *Input)
		fail   int64  // outcomes offset of the violation; -1: none
		msg    string // in its message
		noRun  bool   // a journal that does not start at 0: not served to Run
		want   func(*testing.T, Report)
	}{
		{name: "the executor's outcomes, a repeat included", fail: -1},
		{name: "an outcome whose status differs from its record", fail: 2, msg: "says succeeded with the hash of the key's journal record at offset 4, which says failed, but its contents do not hash",
			mutate: func(t *testing.T, in *Input) {
				// Status, type and id consistent, the hash kept: the
				// journal says failed, the outcome succeeded.
				rc, err := schemas.UnmarshalRecord(in.Journal[4].Value)
				if err != nil {
					t.Fatal(err)
				}
				rc.Status, rc.Error = schemas.StatusSucceeded, nil
				o, err := wire.EncodeOutcome(rc, "cmd-k2", false)
				if err != nil {
					t.Fatal(err)
				}
				o.Topic, o.Partition, o.Offset = tops.Outcomes, pe, 2
				in.Outcomes[2] = o
			}},
		{name: "an outcome whose record was changed and hashed again", fail: 2, msg: "does not hold; the journal's latest record of the key (offset 4) says failed",
			mutate: func(t *testing.T, in *Input) {
				o := reseal(t, in.Journal[4], func(r *schemas.Record) { r.Status = schemas.StatusSucceeded; r.Error = nil })
				in.Outcomes[2] = publish(t, []*kgo.Record{o}, 4, "cmd-k2", false, 2)
			}},
		{name: "an outcome whose type says another status than its record", fail: 2, msg: `type "onceflight.execution.succeeded", but its record's status is failed`,
			mutate: func(t *testing.T, in *Input) {
				editOutcome(t, in, 2, func(b []byte) []byte {
					return bytes.Replace(b, []byte(`execution.failed"`), []byte(`execution.succeeded"`), 1)
				})
			}},
		{name: "the last journal record changed and hashed again", fail: 2, msg: "does not hold; the journal's latest record of the key (offset 4) says succeeded",
			mutate: func(t *testing.T, in *Input) {
				// Nothing chains after the last record: only the outcome
				// that published it shows the change.
				in.Journal[4] = reseal(t, in.Journal[4], func(r *schemas.Record) { r.Status = schemas.StatusSucceeded; r.Error = nil })
			},
			want: func(t *testing.T, r Report) {
				if !find(r, CheckHashChain).OK {
					t.Errorf("hash_chain should hold: %v", find(r, CheckHashChain).Violations)
				}
			}},
		{name: "an outcome that carries no journal record", fail: 1, msg: "says succeeded (no error) with a record that has no hash",
			mutate: func(t *testing.T, in *Input) {
				o := outcome(t, "k1", ent, "cmd-k1b", schemas.StatusSucceeded, pe, 1)
				o.Partition = pe
				in.Outcomes[1] = o
			}},
		{name: "rejections the executor answers without a journal record", fail: -1,
			mutate: func(t *testing.T, in *Input) {
				reused := reject(t, "k1", "cmd-k1c", schemas.CodeKeyReused, 3)
				in.Commands = append(in.Commands, command(t, "cmd-k1c", ent, "k1", pe, 3))
				in.Outcomes = append(in.Outcomes, reused)
				in.Committed[pe] = 4
			},
			want: func(t *testing.T, r Report) {
				if r.Counts.UnjournaledOutcomes != 1 {
					t.Errorf("unjournaled outcomes %d, want 1", r.Counts.UnjournaledOutcomes)
				}
			}},
		{name: "an undecodable command's answer needs its deadletter copy", fail: 3, msg: "which has no deadletter copy",
			mutate: func(t *testing.T, in *Input) {
				ref := tops.Commands + "/" + strconv.Itoa(int(pe)) + "/7"
				o, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: "invalid/" + ref, Entity: ent, Status: schemas.StatusRejected,
					Command: schemas.CommandRef{ID: ref, Partition: pe, Offset: 7}, Error: &schemas.Error{Code: schemas.CodeInvalidCommand, Message: "x"}}, ref, false)
				if err != nil {
					t.Fatal(err)
				}
				o.Topic, o.Partition, o.Offset = tops.Outcomes, pe, 3
				in.Outcomes = append(in.Outcomes, o)
			}},
		{name: "a repeat answered with the record the key had before its settlement", fail: 2,
			msg:    "carries the key's journal record at offset 2 (unresolved), but the key's current record was then the one at offset 3 (succeeded)",
			mutate: settled(false),
		},
		{name: "a repeat answered before the settlement gets the record before it", fail: -1, mutate: settled(true)},
		{name: "a repeat after a release and a new execution answered with the record before the release", fail: 2, noRun: true,
			msg:    "carries the key's journal record at offset 2 (succeeded), but the key's current record was then the one at offset 5 (failed)",
			mutate: releasedK1(2)},
		{name: "a repeat after a release and a new execution answered with the new record", fail: -1, noRun: true, mutate: releasedK1(5)},
		{name: "a command before a release, consumed again, answered with the released record without its release", fail: -1, noRun: true,
			mutate: redeliveredBeforeRelease(nil)},
		{name: "the released record without its release, but with another result", fail: 1, noRun: true,
			msg:    "says succeeded with the hash of the key's journal record at offset 3, which says succeeded, but its contents do not hash",
			mutate: redeliveredBeforeRelease(func(r *schemas.Record) { r.Result = []byte(`{"refund_id":"forged"}`) })},
		{name: "a record retention deleted is counted, not compared", fail: -1, noRun: true,
			mutate: func(t *testing.T, in *Input) {
				in.Journal = in.Journal[3:] // k1's records are gone
				in.JournalStart = map[int32]int64{pe: 3}
			},
			want: func(t *testing.T, r Report) {
				if r.Counts.OutcomesPastRetention != 2 || !hasNote(r, "outcomes_past_retention") {
					t.Errorf("past retention %d, notes %q", r.Counts.OutcomesPastRetention, r.Notes)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := matchHistory(t)
			if tt.mutate != nil {
				tt.mutate(t, &in)
			}
			r := Check(in)
			c := find(r, CheckOutcomesMatch)
			for _, o := range r.Checks {
				if o.Name != CheckOutcomesMatch && !o.OK {
					t.Errorf("%s fails: %v", o.Name, o.Violations)
				}
			}
			switch {
			case tt.fail < 0 && !r.OK():
				t.Errorf("the history fails: %v", c.Violations)
			case tt.fail >= 0 && (r.OK() || c.Count != 1 || len(c.Violations) != 1):
				t.Errorf("want one outcomes_match violation; OK()=%v, %+v", r.OK(), c)
			case tt.fail >= 0:
				v := c.Violations[0]
				if v.Offset != tt.fail || v.Partition != pe || v.Topic != tops.Outcomes || !strings.Contains(v.Message, tt.msg) {
					t.Errorf("violation %v, want outcomes partition %d offset %d saying %q", v, pe, tt.fail, tt.msg)
				}
			}
			if tt.want != nil {
				tt.want(t, r)
			}
			if !t.Failed() {
				// Outcomes read before the journal records they carry
				// wait for them: the same report.
				outcomesFirst(t, in, r)
			}
			if !t.Failed() && !tt.noRun {
				// Run, reading the journal and the outcomes in small
				// chunks, reaches the same report.
				runHistory(t, in, r, 1)
			}
		})
	}
}

// reject is the outcome the executor publishes for a rejection that keeps
// the key's record: a record of the command, never journaled.
func reject(t *testing.T, key, causation, code string, at int64) *kgo.Record {
	t.Helper()
	o, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: key, Entity: ent, Status: schemas.StatusRejected,
		Command: schemas.CommandRef{ID: causation, Partition: pe, Offset: at}, Error: &schemas.Error{Code: code, Message: "x"}}, causation, false)
	if err != nil {
		t.Fatal(err)
	}
	o.Topic, o.Partition, o.Offset = tops.Outcomes, pe, at
	return o
}

// settled is k1 left unresolved (journal offset 2, answered), then
// confirmed succeeded by the reconciler (offset 3, its second outcome),
// and a repeat cmd-k1b answered with the unresolved record: at outcomes
// offset 1, before the settlement's outcome, or at 2, after it.
func settled(repeatFirst bool) func(*testing.T, *Input) {
	return func(t *testing.T, in *Input) {
		js := journal(t, pe,
			marker(1),
			rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
			rec("k1", ent, schemas.StatusUnresolved, 1, 0, 0),
			rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
		)
		in.Journal = js
		in.Commands = in.Commands[:2]
		in.Committed[pe] = 2
		repeat, settle := int64(2), int64(1)
		if repeatFirst {
			repeat, settle = 1, 2
		}
		in.Outcomes = []*kgo.Record{
			publish(t, js, 2, "cmd-k1", false, 0),
			publish(t, js, 2, "cmd-k1b", true, repeat),
			publish(t, js, 3, "cmd-k1", false, settle),
		}
		in.Outcomes = sorted(in.Outcomes) // produced in offset order
	}
}

// outcomesFirst feeds in to an auditor as Run may when a partition's
// outcomes come before its journal: its deadletters, then its outcomes,
// then its journal records, its end, and its commands. The report must be
// want, Check's.
func outcomesFirst(t *testing.T, in Input, want Report) {
	t.Helper()
	a := newAuditor(in)
	for _, r := range in.Deadletter {
		a.deadletter(r)
	}
	a.records(sorted(in.Outcomes))
	if len(a.outQ[pe]) == 0 {
		t.Fatal("no outcome waited for its record")
	}
	a.records(sorted(in.Journal))
	a.endJournal(pe)
	a.endAnswers()
	a.records(sorted(in.Commands))
	got := a.finish()
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
		t.Fatalf("outcomes first gave\n%s\nCheck gave\n%s", g, w)
	}
}

// releasedK1 is k1 executed (succeeded, journal offset 2, answered),
// released by the command at offset 1 (journal offset 3), executed again
// for cmd-k1c at commands offset 2 (failed, journal offset 5, answered),
// then repeated by cmd-k1d, answered with the record at journal offset
// repeated.
func releasedK1(repeated int64) func(*testing.T, *Input) {
	return func(t *testing.T, in *Input) {
		k1 := func(st schemas.Status, seq, off int64) jent { return at(rec("k1", ent, st, 1, seq, 0), off) }
		again := func(e jent) jent { e.rec.Command.ID = "cmd-k1c"; return e }
		js := journal(t, pe,
			marker(1),
			k1(schemas.StatusInProgress, 1, 0),
			k1(schemas.StatusSucceeded, 0, 0),
			released(k1(schemas.StatusSucceeded, 0, 0), pos(1)),
			again(k1(schemas.StatusInProgress, 2, 2)),
			again(k1(schemas.StatusFailed, 0, 2)),
		)
		in.Journal = js
		in.Commands = []*kgo.Record{command(t, "cmd-k1", ent, "k1", pe, 0), command(t, "cmd-k1c", ent, "k1", pe, 2),
			command(t, "cmd-k1d", ent, "k1", pe, 3)}
		in.Committed[pe] = 4
		in.Outcomes = []*kgo.Record{
			publish(t, js, 2, "cmd-k1", false, 0),
			publish(t, js, 5, "cmd-k1c", false, 1),
			publish(t, js, repeated, "cmd-k1d", true, 2),
		}
	}
}

// redeliveredBeforeRelease is k1 executed (journal offset 2, answered),
// then released by the command at offset 1 (journal offset 3); cmd-k1,
// consumed again after a restart, is answered with the key's record as
// it was before the release (decide.Named drops the release member; the
// executor publishes the record so, its hash the released record's),
// with f applied to it.
func redeliveredBeforeRelease(f func(*schemas.Record)) func(*testing.T, *Input) {
	return func(t *testing.T, in *Input) {
		k1 := func(st schemas.Status, seq, off int64) jent { return at(rec("k1", ent, st, 1, seq, 0), off) }
		js := journal(t, pe,
			marker(1),
			k1(schemas.StatusInProgress, 1, 0),
			k1(schemas.StatusSucceeded, 0, 0),
			released(k1(schemas.StatusSucceeded, 0, 0), pos(1)),
		)
		in.Journal = js
		in.Commands = in.Commands[:1]
		in.Committed[pe] = 1
		rc, err := schemas.UnmarshalRecord(js[3].Value)
		if err != nil {
			t.Fatal(err)
		}
		rc.Release = nil
		if f != nil {
			f(&rc)
		}
		again, err := wire.EncodeOutcome(rc, "cmd-k1", false)
		if err != nil {
			t.Fatal(err)
		}
		again.Topic, again.Partition, again.Offset = tops.Outcomes, pe, 1
		in.Outcomes = []*kgo.Record{publish(t, js, 2, "cmd-k1", false, 0), again}
	}
}
