package audit

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

const nParts = 3

var (
	tops = schemas.DefaultTopics()
	t0   = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

// jent is one journal entry of a hand-built partition: an epoch marker
// (rec nil) or a record.
type jent struct {
	epoch int64
	rec   *schemas.Record
}

func marker(epoch int64) jent { return jent{epoch: epoch} }

// rec builds an execution record; tok is the fencing token's sequence under
// epoch 1.
func rec(key, entity string, st schemas.Status, attempts int, seq int64, at time.Duration) jent {
	start, end := t0.Add(at), t0.Add(at+time.Second)
	r := &schemas.Record{IdempotencyKey: key, Entity: entity, Action: "noop.ping", Status: st, Attempts: attempts,
		Command: schemas.CommandRef{ID: "cmd-" + key}, StartedAt: &start, Epoch: 1}
	if st == schemas.StatusInProgress {
		r.FencingToken = 1<<32 | seq
		r.Deadline = &end
	} else {
		r.FinishedAt = &end
	}
	return jent{rec: r}
}

// journal writes ents to partition p from offset 0, chaining the records'
// hashes as the committer does.
func journal(t *testing.T, p int32, ents ...jent) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	prev := ""
	for i, e := range ents {
		r := &kgo.Record{Topic: tops.Journal, Partition: p, Offset: int64(i)}
		if e.rec == nil {
			r.Key = []byte("onceflight.epoch")
			r.Value = []byte(`{"epoch":` + strconv.FormatInt(e.epoch, 10) + `,"executor":"t"}`)
			r.Headers = []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindEpoch)}}
			out = append(out, r)
			continue
		}
		rc := *e.rec
		rc.Command.Partition = p
		rc.PrevHash = prev
		if _, err := wire.SealRecord(&rc); err != nil {
			t.Fatal(err)
		}
		prev = rc.Hash
		r.Key = []byte(rc.IdempotencyKey)
		r.Value = mustMarshal(t, rc)
		r.Headers = []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}
		out = append(out, r)
	}
	return out
}

func mustMarshal(t *testing.T, rc schemas.Record) []byte {
	t.Helper()
	b, err := wire.MarshalRecord(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func command(t *testing.T, id, entity, key string, p int32, off int64) *kgo.Record {
	t.Helper()
	r, err := schemas.EncodeCommand(schemas.Command{ID: id, Source: "test", Type: "noop.ping", Subject: entity, IdempotencyKey: key}, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic, r.Partition, r.Offset = tops.Commands, p, off
	return r
}

func outcome(t *testing.T, key, entity, causation string, st schemas.Status, p int32, off int64) *kgo.Record {
	t.Helper()
	r, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: key, Entity: entity, Status: st,
		Command: schemas.CommandRef{ID: causation, Partition: p}}, causation, false)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic, r.Offset = tops.Outcomes, off
	return r
}

// otherPartition is a partition that is not p.
func otherPartition(p int32) int32 { return (p + 1) % nParts }

var (
	ent = "order-1"
	pe  = partitioner.ForEntity(ent, nParts)
)

// base is a healthy history: two keys of one entity executed one after the
// other, each answered, offsets committed past both commands.
func base(t *testing.T) Input {
	return Input{
		Topics:            tops,
		CommandPartitions: nParts,
		Commands:          []*kgo.Record{command(t, "cmd-k1", ent, "k1", pe, 0), command(t, "cmd-k2", ent, "k2", pe, 1)},
		Journal: journal(t, pe,
			marker(1),
			rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
			rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
			rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second),
			rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Second),
		),
		Outcomes: []*kgo.Record{
			outcome(t, "k1", ent, "cmd-k1", schemas.StatusSucceeded, pe, 0),
			outcome(t, "k2", ent, "cmd-k2", schemas.StatusSucceeded, pe, 1),
		},
		Committed:     map[int32]int64{pe: 2},
		MaxViolations: 20,
	}
}

// rewrite replaces the value of journal record off with f applied to it,
// keeping its hash fields: what a tamperer without the chain would do.
func rewrite(t *testing.T, in *Input, off int64, f func(*schemas.Record)) {
	t.Helper()
	for _, r := range in.Journal {
		if r.Offset == off {
			rc, err := schemas.UnmarshalRecord(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			f(&rc)
			r.Value = mustMarshal(t, rc)
			return
		}
	}
	t.Fatalf("no journal offset %d", off)
}

// forwardK3 adds cmd-k3 consumed on a partition not its entity's and its
// forwarded copy on the right one (offset 2), both committed.
func forwardK3(t *testing.T, in *Input) {
	t.Helper()
	wrong := otherPartition(pe)
	in.Commands = append(in.Commands, command(t, "cmd-k3", ent, "k3", wrong, 0))
	in.Committed[wrong] = 1
	fw := command(t, "cmd-k3", ent, "k3", pe, 2)
	fw.Headers = append(fw.Headers,
		kgo.RecordHeader{Key: schemas.HeaderForwardedFromPartition, Value: []byte(strconv.Itoa(int(wrong)))},
		kgo.RecordHeader{Key: schemas.HeaderForwardedFromOffset, Value: []byte("0")})
	in.Commands = append(in.Commands, fw)
	in.Committed[pe] = 3
}

// deadletterMisroutedK3 adds cmd-k3 consumed on a partition not its
// entity's, too large to forward, so deadlettered; it returns that
// partition.
func deadletterMisroutedK3(t *testing.T, in *Input) int32 {
	t.Helper()
	wrong := otherPartition(pe)
	big := command(t, "cmd-k3", ent, "k3", wrong, 0)
	in.Commands = append(in.Commands, big)
	in.Committed[wrong] = 1
	dl := wire.DeadletterReference(big, "too_large", func(*kgo.Record) bool { return true })
	dl.Topic = tops.Deadletter
	in.Deadletter = []*kgo.Record{dl}
	return wrong
}

// takeover is a history where owner epoch 1 leaves k1's attempt in
// progress (deadline t0+1s), owner epoch 2 settles k1 and then starts k2
// at t0+k2Start.
func takeover(k2Start time.Duration) func(*testing.T, *Input) {
	return func(t *testing.T, in *Input) {
		k1b, k2a, k2b := rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
			rec("k2", ent, schemas.StatusInProgress, 1, 1, k2Start), rec("k2", ent, schemas.StatusSucceeded, 1, 0, k2Start)
		for _, j := range []jent{k1b, k2a, k2b} {
			j.rec.Epoch = 2
		}
		k2a.rec.FencingToken = 2<<32 | 1
		in.Journal = journal(t, pe, marker(1),
			rec("k1", ent, schemas.StatusInProgress, 1, 1, 0), // deadline t0+1s
			marker(2), k1b, k2a, k2b)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*testing.T, *Input)
		fail   map[string]int64 // failing check -> offset its first violation names
		want   func(*testing.T, Report)
	}{
		{name: "healthy", want: func(t *testing.T, r Report) {
			c := r.Counts
			if c.Commands != 2 || c.Outcomes != 2 || c.JournalRecords != 4 || c.Keys != 2 || c.Pending != 0 {
				t.Errorf("counts %+v", c)
			}
		}},
		{name: "chain break: a record deleted", mutate: func(t *testing.T, in *Input) {
			in.Journal = slices.Delete(in.Journal, 3, 4) // offset 3 gone
		}, fail: map[string]int64{CheckHashChain: 4}},
		{name: "modified record", mutate: func(t *testing.T, in *Input) {
			rewrite(t, in, 2, func(r *schemas.Record) { r.Result = json.RawMessage(`{"refund_id":"forged"}`) })
			// Its outcome (linked below) carries the changed bytes too.
		}, fail: map[string]int64{CheckHashChain: 2, CheckOutcomesMatch: 0}},
		{name: "first record with a prev_hash", mutate: func(t *testing.T, in *Input) {
			in.Journal = in.Journal[2:] // starts mid-chain, yet log start is 0
		}, fail: map[string]int64{CheckHashChain: 2}},
		{name: "retention took the start of the chain", mutate: func(t *testing.T, in *Input) {
			in.Journal = in.Journal[2:]
			in.JournalStart = map[int32]int64{pe: 2}
		}, want: func(t *testing.T, r Report) {
			if !hasNote(r, "retention") {
				t.Errorf("no retention note: %v", r.Notes)
			}
		}},
		{name: "missing outcome below the committed offset", mutate: func(t *testing.T, in *Input) {
			in.Outcomes = in.Outcomes[:1]
		}, fail: map[string]int64{CheckAnswered: 1}},
		{name: "missing outcome above the committed offset is pending", mutate: func(t *testing.T, in *Input) {
			in.Outcomes = in.Outcomes[:1]
			in.Committed[pe] = 1
		}, want: func(t *testing.T, r Report) {
			if r.Counts.Pending != 1 {
				t.Errorf("pending = %d, want 1", r.Counts.Pending)
			}
		}},
		{name: "no committed offset: everything pending", mutate: func(t *testing.T, in *Input) {
			in.Outcomes = nil
			in.Committed = nil
		}, want: func(t *testing.T, r Report) {
			if r.Counts.Pending != 2 {
				t.Errorf("pending = %d, want 2", r.Counts.Pending)
			}
		}},
		{name: "in_progress after succeeded", mutate: func(t *testing.T, in *Input) {
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
				rec("k1", ent, schemas.StatusInProgress, 2, 2, time.Hour),
				rec("k1", ent, schemas.StatusSucceeded, 2, 0, time.Hour),
				rec("k2", ent, schemas.StatusInProgress, 1, 3, 2*time.Hour),
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Hour))
		}, fail: map[string]int64{CheckOncePerKey: 3}},
		{name: "unresolved then reconciled is fine", mutate: func(t *testing.T, in *Input) {
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
				rec("k1", ent, schemas.StatusUnresolved, 1, 0, 0),
				rec("k1", ent, schemas.StatusInProgress, 2, 2, time.Minute),
				rec("k1", ent, schemas.StatusSucceeded, 2, 0, time.Minute),
				rec("k2", ent, schemas.StatusInProgress, 1, 3, 2*time.Minute),
				rec("k2", ent, schemas.StatusUnresolved, 1, 0, 2*time.Minute))
		}, want: func(t *testing.T, r Report) {
			if r.Counts.UnresolvedKeys != 1 {
				t.Errorf("unresolved keys = %d, want 1", r.Counts.UnresolvedKeys)
			}
		}},
		{name: "re-execution beyond key_memory is only noted", mutate: func(t *testing.T, in *Input) {
			in.KeyMemory = 24 * time.Hour
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
				rec("k1", ent, schemas.StatusInProgress, 1, 2, 48*time.Hour),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 48*time.Hour),
				rec("k2", ent, schemas.StatusInProgress, 1, 3, 49*time.Hour),
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, 49*time.Hour))
		}, want: func(t *testing.T, r Report) {
			if !hasNote(r, "key_memory") {
				t.Errorf("no key_memory note: %v", r.Notes)
			}
		}},
		{name: "attempts go down", mutate: func(t *testing.T, in *Input) {
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 2, 1, 0),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
				rec("k1", ent, schemas.StatusSucceeded, 2, 0, 0))
		}, fail: map[string]int64{CheckOncePerKey: 2}},
		{name: "overlapping in_progress for an entity", mutate: func(t *testing.T, in *Input) {
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
				rec("k2", ent, schemas.StatusInProgress, 1, 2, 0),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, 0))
		}, fail: map[string]int64{CheckSingleFlight: 2}, want: func(t *testing.T, r Report) {
			m := find(r, CheckSingleFlight).Violations[0].Message
			if !strings.Contains(m, `"k1"`) || !strings.Contains(m, `"k2"`) || !strings.Contains(m, "offset 1") {
				t.Errorf("message should name both keys and k1's offset: %s", m)
			}
		}},
		{name: "other entities may overlap", mutate: func(t *testing.T, in *Input) {
			other := ""
			for i := 2; other == ""; i++ {
				if e := "order-" + strconv.Itoa(i); partitioner.ForEntity(e, nParts) == pe {
					other = e // of the same partition, where each record is written
				}
			}
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
				rec("k2", other, schemas.StatusInProgress, 1, 2, 0),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
				rec("k2", other, schemas.StatusSucceeded, 1, 0, 0))
		}},
		{name: "fencing token goes backwards", mutate: func(t *testing.T, in *Input) {
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 5, 0),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
				rec("k2", ent, schemas.StatusInProgress, 1, 4, time.Second),
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, time.Second))
		}, fail: map[string]int64{CheckSingleFlight: 3}},
		{name: "a retry may reuse its token", mutate: func(t *testing.T, in *Input) {
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 5, 0),
				rec("k1", ent, schemas.StatusInProgress, 2, 5, 0),
				rec("k1", ent, schemas.StatusSucceeded, 2, 0, 0))
		}},
		{name: "record of a replaced owner", mutate: func(t *testing.T, in *Input) {
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
				marker(2),
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, 0)) // epoch 1 after marker 2
		}, fail: map[string]int64{CheckSingleFlight: 4}},
		{name: "record of a replaced owner after retention took the marker", mutate: func(t *testing.T, in *Input) {
			// Retention deleted marker 2; restore still takes epoch 2 from
			// k1's records and ignores k2's epoch-1 record after them.
			k1a, k1b := rec("k1", ent, schemas.StatusInProgress, 1, 1, 0), rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0)
			k1a.rec.Epoch, k1b.rec.Epoch = 2, 2
			k1a.rec.FencingToken = 2<<32 | 1
			in.Journal = journal(t, pe, k1a, k1b,
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, 0)) // epoch 1 after epoch 2's records
			in.JournalStart = map[int32]int64{pe: 7}
		}, fail: map[string]int64{CheckSingleFlight: 2}},
		{name: "a new owner starts another key before the inherited attempt's deadline", mutate: takeover(500 * time.Millisecond),
			fail: map[string]int64{CheckSingleFlight: 4}},
		{name: "a new owner starts another key after the inherited attempt's deadline", mutate: takeover(2 * time.Second)},
		{name: "an entity's record on another partition than its own", mutate: func(t *testing.T, in *Input) {
			// Executed outside its single flight (say, misrouted and run in
			// place): that partition's keys and entities are another history.
			in.Journal = append(in.Journal, journal(t, otherPartition(pe), marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 9, 0),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0))...)
		}, fail: map[string]int64{CheckSingleFlight: 1}},
		{name: "misrouted without a forward", mutate: func(t *testing.T, in *Input) {
			wrong := otherPartition(pe)
			in.Commands = append(in.Commands, command(t, "cmd-k3", ent, "k3", wrong, 0))
			in.Committed[wrong] = 1
		}, fail: map[string]int64{CheckAnswered: 0}},
		{name: "misrouted and forwarded", mutate: func(t *testing.T, in *Input) {
			forwardK3(t, in)
			in.Outcomes = append(in.Outcomes, outcome(t, "k3", ent, "cmd-k3", schemas.StatusSucceeded, pe, 2))
		}, want: func(t *testing.T, r Report) {
			if r.Counts.Forwarded != 1 || r.Counts.Commands != 4 {
				t.Errorf("counts %+v", r.Counts)
			}
		}},
		{name: "misrouted, too large to forward: deadlettered and answered", mutate: func(t *testing.T, in *Input) {
			wrong := deadletterMisroutedK3(t, in)
			in.Outcomes = append(in.Outcomes, outcome(t, "k3", ent, "cmd-k3", schemas.StatusRejected, wrong, 0))
		}, want: func(t *testing.T, r Report) {
			if r.Counts.Deadlettered != 1 || r.Counts.Forwarded != 0 {
				t.Errorf("counts %+v", r.Counts)
			}
		}},
		{name: "misrouted, deadlettered without an outcome", mutate: func(t *testing.T, in *Input) {
			deadletterMisroutedK3(t, in)
		}, fail: map[string]int64{CheckAnswered: 0}},
		{name: "forwarded copy without an outcome", mutate: func(t *testing.T, in *Input) {
			forwardK3(t, in)
		}, fail: map[string]int64{CheckAnswered: 2}},
		{name: "undecodable and deadlettered", mutate: func(t *testing.T, in *Input) {
			bad := &kgo.Record{Topic: tops.Commands, Partition: pe, Offset: 2, Value: []byte("not a cloudevent")}
			in.Commands = append(in.Commands, bad)
			in.Committed[pe] = 3
			dl := wire.DeadletterRecord(bad, "not a CloudEvent")
			dl.Topic = tops.Deadletter
			in.Deadletter = []*kgo.Record{dl}
		}, want: func(t *testing.T, r Report) {
			if r.Counts.Deadlettered != 1 {
				t.Errorf("deadlettered = %d", r.Counts.Deadlettered)
			}
		}},
		{name: "undecodable, not deadlettered", mutate: func(t *testing.T, in *Input) {
			in.Commands = append(in.Commands, &kgo.Record{Topic: tops.Commands, Partition: pe, Offset: 2, Value: []byte("junk")})
			in.Committed[pe] = 3
		}, fail: map[string]int64{CheckAnswered: 2}},
		{name: "reconcile requests need no outcome", mutate: func(t *testing.T, in *Input) {
			r, err := schemas.EncodeCommand(schemas.Command{ID: "rc", Source: "onceflight-reconciler", Type: "onceflight.reconcile",
				Subject: ent, IdempotencyKey: "reconcile/rc", Data: json.RawMessage(`{"key":"k1"}`)}, schemas.Binary)
			if err != nil {
				t.Fatal(err)
			}
			r.Topic, r.Partition, r.Offset = tops.Commands, pe, 2
			in.Commands = append(in.Commands, r)
			in.Committed[pe] = 3
		}},
		{name: "republished outcome is counted, not a violation", mutate: func(t *testing.T, in *Input) {
			in.Outcomes = append(in.Outcomes, outcome(t, "k1", ent, "cmd-k1", schemas.StatusSucceeded, pe, 2))
		}, want: func(t *testing.T, r Report) {
			if r.Counts.Republications != 1 {
				t.Errorf("republications = %d", r.Counts.Republications)
			}
		}},
		{name: "outcome id for two answers", mutate: func(t *testing.T, in *Input) {
			forged := outcome(t, "k1", ent, "cmd-k1", schemas.StatusFailed, pe, 2)
			// Same id as the succeeded outcome, different status.
			var ev map[string]any
			if err := json.Unmarshal(forged.Value, &ev); err != nil {
				t.Fatal(err)
			}
			ev["id"] = schemas.OutcomeID("k1", schemas.StatusSucceeded, "cmd-k1")
			forged.Value, _ = json.Marshal(ev)
			in.Outcomes = append(in.Outcomes, forged)
		}, fail: map[string]int64{CheckOutcomeIDs: 2, CheckOncePerKey: 2}},
		{name: "partitions restrict the checks", mutate: func(t *testing.T, in *Input) {
			in.Partitions = []int32{otherPartition(pe)}
			in.Outcomes = nil // would fail if pe were checked
		}, want: func(t *testing.T, r Report) {
			if r.Counts.Commands != 0 || r.Counts.JournalRecords != 0 {
				t.Errorf("counts %+v", r.Counts)
			}
		}},
		{name: "max violations lists the first only", mutate: func(t *testing.T, in *Input) {
			in.MaxViolations = 1
			in.Outcomes = nil
		}, fail: map[string]int64{CheckAnswered: 0}, want: func(t *testing.T, r Report) {
			c := find(r, CheckAnswered)
			if c.Count != 2 || len(c.Violations) != 1 {
				t.Errorf("count %d listed %d", c.Count, len(c.Violations))
			}
		}},
	}
	// evidence: k1's final record (offset 2) says how it was established.
	ambiguous := schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: 1, At: t0, Answer: schemas.AnswerAmbiguous, Detail: "after 2s: timeout"}
	answered := schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: 1, At: t0, Answer: schemas.AnswerSucceeded}
	found := schemas.Evidence{Kind: schemas.EvidenceConfirm, Attempt: 1, At: t0.Add(time.Second), Answer: schemas.AnswerFound, By: schemas.ByExecutor}
	withK1 := func(by string, res *schemas.Resolution, evs ...schemas.Evidence) func(*testing.T, *Input) {
		return func(t *testing.T, in *Input) {
			k1 := rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0)
			k1.rec.EstablishedBy, k1.rec.Evidence, k1.rec.Resolution = by, evs, res
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0), k1,
				rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second),
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Second))
		}
	}
	notFound := schemas.Evidence{Kind: schemas.EvidenceConfirm, Attempt: 1, At: t0.Add(time.Second), Answer: schemas.AnswerNotFound, By: schemas.ByExecutor}
	rejected2 := schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: 2, At: t0.Add(2 * time.Second), Answer: schemas.AnswerRejected}
	// failedK1 makes k1 end failed connector_rejected after attempt 2,
	// established by answer, with evidence evs.
	failedK1 := func(evs ...schemas.Evidence) func(*testing.T, *Input) {
		return func(t *testing.T, in *Input) {
			k1 := rec("k1", ent, schemas.StatusFailed, 2, 0, 0)
			k1.rec.EstablishedBy, k1.rec.Evidence = schemas.EstablishedByAnswer, evs
			k1.rec.Error = &schemas.Error{Code: schemas.CodeConnectorRejected, Message: "no"}
			in.Journal = journal(t, pe, marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0), k1,
				rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second),
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Second))
			in.Outcomes[0] = outcome(t, "k1", ent, "cmd-k1", schemas.StatusFailed, pe, 0)
		}
	}
	tests = append(tests, []struct {
		name   string
		mutate func(*testing.T, *Input)
		fail   map[string]int64
		want   func(*testing.T, Report)
	}{
		{name: "records from before established_by are accepted and counted", want: func(t *testing.T, r Report) {
			var text strings.Builder
			_ = r.WriteText(&text)
			if r.Counts.WithoutEstablishedBy != 2 || !strings.Contains(text.String(), "2 journal records were written before records said how") {
				t.Errorf("without established_by = %d\n%s", r.Counts.WithoutEstablishedBy, text.String())
			}
		}},
		{name: "confirmation with its evidence", mutate: withK1(schemas.EstablishedByConfirmation, nil, ambiguous, found), want: func(t *testing.T, r Report) {
			if r.Counts.WithoutEstablishedBy != 1 {
				t.Errorf("without established_by = %d, want 1 (k2)", r.Counts.WithoutEstablishedBy)
			}
		}},
		{name: "answer with its evidence", mutate: withK1(schemas.EstablishedByAnswer, nil, answered)},
		{name: "confirmation claimed without a confirmation", mutate: withK1(schemas.EstablishedByConfirmation, nil, ambiguous),
			fail: map[string]int64{CheckEvidence: 2}},
		{name: "confirmation claimed after a definite answer", mutate: withK1(schemas.EstablishedByConfirmation, nil, answered, found),
			fail: map[string]int64{CheckEvidence: 2}},
		{name: "answer claimed but the last attempt was ambiguous", mutate: withK1(schemas.EstablishedByAnswer, nil, ambiguous),
			fail: map[string]int64{CheckEvidence: 2}},
		{name: "answer claimed without an attempt", mutate: withK1(schemas.EstablishedByAnswer, nil),
			fail: map[string]int64{CheckEvidence: 2}},
		{name: "operator claimed without a resolution", mutate: withK1(schemas.EstablishedByOperator, nil, ambiguous),
			fail: map[string]int64{CheckEvidence: 2}},
		{name: "operator with a resolution", mutate: withK1(schemas.EstablishedByOperator,
			&schemas.Resolution{By: "ann", At: t0, Reason: "checked", As: schemas.StatusSucceeded}, ambiguous)},
		{name: "failed after an ambiguous attempt no confirmation found not done", mutate: failedK1(ambiguous, rejected2),
			fail: map[string]int64{CheckEvidence: 2}},
		{name: "failed after an ambiguous attempt confirmed not found", mutate: failedK1(ambiguous, notFound, rejected2)},
		{name: "unknown established_by", mutate: withK1("luck", nil, answered),
			fail: map[string]int64{CheckEvidence: 2}},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base(t)
			if tt.mutate != nil {
				tt.mutate(t, &in)
			}
			// The outcomes carry their journal records, as the
			// executor's do, where the case's journal has them.
			linked := linkOutcomes(t, &in)
			r := Check(in)
			for _, c := range r.Checks {
				off, shouldFail := tt.fail[c.Name]
				if c.Name == CheckOutcomesMatch && !linked && !shouldFail {
					continue
				}
				if c.OK == shouldFail {
					t.Errorf("%s ok=%v, want %v; violations %v", c.Name, c.OK, !shouldFail, c.Violations)
					continue
				}
				if shouldFail && len(c.Violations) > 0 && c.Violations[0].Offset != off {
					t.Errorf("%s first violation at offset %d, want %d: %v", c.Name, c.Violations[0].Offset, off, c.Violations[0])
				}
			}
			if ok := r.OK() || (!linked && r.Failed() == 1 && !find(r, CheckOutcomesMatch).OK); ok != (len(tt.fail) == 0) {
				t.Errorf("OK() = %v", r.OK())
			}
			if tt.want != nil {
				tt.want(t, r)
			}
		})
	}
}

func find(r Report, name string) CheckResult {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return CheckResult{}
}

func hasNote(r Report, sub string) bool {
	return slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, sub) })
}

func TestReportFormats(t *testing.T) {
	in := base(t)
	in.Outcomes = nil
	in.MaxViolations = 1
	r := Check(in)
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hash_chain", "(G5) ok", "commands_answered  (G4) FAILED (2)", "... and 1 more", "commands 2,"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var js strings.Builder
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Checks []struct {
			Name       string            `json:"name"`
			OK         bool              `json:"ok"`
			Violations []json.RawMessage `json:"violations"`
		} `json:"checks"`
		Counts map[string]int `json:"counts"`
	}
	if err := json.Unmarshal([]byte(js.String()), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Checks) != 7 || got.Checks[0].Violations == nil || got.Counts["commands"] != 2 {
		t.Errorf("json report: %s", js.String())
	}
	if r.Checks[0].Violations != nil {
		t.Error("WriteJSON changed the report")
	}
}

// TestStreamingOrderDoesNotMatter: Run feeds records as fetches deliver
// them, partitions interleaved. The report, including which violations are
// listed under MaxViolations, must be the one Check gives for the sorted
// records.
func TestStreamingOrderDoesNotMatter(t *testing.T) {
	in := base(t)
	ent2 := ""
	for i := 2; ent2 == ""; i++ {
		if e := "order-" + strconv.Itoa(i); partitioner.ForEntity(e, nParts) != pe {
			ent2 = e
		}
	}
	p2 := partitioner.ForEntity(ent2, nParts)
	j2 := journal(t, p2,
		rec("k3", ent2, schemas.StatusInProgress, 1, 1, 0),
		rec("k3", ent2, schemas.StatusSucceeded, 1, 0, 0),
		rec("k3", ent2, schemas.StatusInProgress, 2, 2, time.Second), // G2: after final
	)
	// G5 on p2 too: its last record changed, so hash_chain fails on
	// both partitions and MaxViolations 1 must pick the lower one.
	rc, err := schemas.UnmarshalRecord(j2[2].Value)
	if err != nil {
		t.Fatal(err)
	}
	rc.Result = json.RawMessage(`{"forged":true}`)
	j2[2].Value = mustMarshal(t, rc)
	in.Journal = slices.Delete(in.Journal, 3, 4) // G5 on pe at offset 4
	in.Journal = append(in.Journal, j2...)
	in.MaxViolations = 1

	want := Check(in)
	if hc := find(want, CheckHashChain); hc.Count != 2 || find(want, CheckOncePerKey).OK {
		t.Fatalf("the history should fail hash_chain twice and once_per_key: %+v", want.Checks)
	}

	// Feed the partitions in reverse order, each in offset order, as a
	// fetch may deliver them; commands keep coming after their answers,
	// as in Run (they are judged by them).
	byPart := map[int32][]*kgo.Record{}
	for _, r := range in.Journal {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	parts := slices.Sorted(func(yield func(int32) bool) {
		for p := range byPart {
			if !yield(p) {
				return
			}
		}
	})
	slices.Reverse(parts)
	a := newAuditor(in)
	for _, p := range parts {
		for _, r := range byPart[p] {
			a.journalRecord(r)
		}
	}
	for _, r := range in.Outcomes {
		a.outcome(r)
	}
	for _, r := range in.Commands {
		a.command(r)
	}
	got := a.finish()
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
		t.Fatalf("interleaved feed gave\n%s\nsorted feed gave\n%s", g, w)
	}
}
