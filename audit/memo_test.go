package audit

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// dataOf is the bytes of outcome event r's data member: its record's JSON.
func dataOf(t *testing.T, r *kgo.Record) []byte {
	t.Helper()
	i := bytes.Index(r.Value, []byte(`,"data":`))
	if i < 0 {
		t.Fatalf("no data in %s", r.Value)
	}
	return r.Value[i+len(`,"data":`) : len(r.Value)-1]
}

// TestDecodeOutcomeKnownRecord: an outcome whose data has the bytes of a
// record in the memo takes that record's fields instead of decoding it (a
// planted entry shows the lookup is made), gets exactly the facts a decode
// gives for a real entry, and a record differing in one byte is decoded.
func TestDecodeOutcomeKnownRecord(t *testing.T) {
	samples := outcomeSamples(t)
	for i, r := range samples[:len(samples)-1] { // the last one is not read by the fast path
		data := dataOf(t, r)
		rec, err := schemas.UnmarshalRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		m := newRecordMemo()
		m.add(m.sum(data), data, &rec)
		got, fromMemo, ok := decodeOutcomeFast(r, m)
		if want := wantFacts(t, r); !ok || !fromMemo || got != want {
			t.Fatalf("sample %d: with its record in the memo: %+v, %v, %v; want %+v from the memo", i, got, fromMemo, ok, want)
		}
		planted := newRecordMemo()
		planted.add(planted.sum(data), data, &schemas.Record{IdempotencyKey: "planted", Status: schemas.StatusHeld})
		if got, _, ok := decodeOutcomeFast(r, planted); !ok || got.key != "planted" || got.status != schemas.StatusHeld {
			t.Fatalf("sample %d: the memo's entry for its data was not used: %+v", i, got)
		}
	}
	// The record's bytes with one change (its hash member kept, as a
	// tamperer would): not the memo's record, even under its sum.
	r := samples[0]
	data := dataOf(t, r)
	m := newRecordMemo()
	changed := *r
	changed.Value = []byte(strings.Replace(string(r.Value), `"status":"succeeded"`, `"status":"failed"`, 1))
	m.add(m.sum(dataOf(t, &changed)), data, &schemas.Record{IdempotencyKey: "planted", Status: schemas.StatusHeld})
	got, fromMemo, ok := decodeOutcomeFast(&changed, m)
	if want := wantFacts(t, &changed); !ok || fromMemo || got != want || got.status != schemas.StatusFailed {
		t.Fatalf("a changed record: %+v, %v, %v; want %+v, decoded", got, fromMemo, ok, want)
	}
}

// TestRecordMemoBound: the memo keeps the latest records, in two
// generations of at most memoArena bytes and memoEntries entries each, and
// forgets the older ones.
func TestRecordMemoBound(t *testing.T) {
	arena, entries := memoArena, memoEntries
	t.Cleanup(func() { memoArena, memoEntries = arena, entries })
	raw := func(i int) []byte { return fmt.Appendf(nil, `{"record":%04d}`, i) } // 15 bytes
	for _, c := range []struct {
		name            string
		arena, entries  int
		oldest, maxEnts int // the oldest of the 20 records still found; entries held at most
	}{
		{"bytes", 4 * 15, 1000, 12, 8},
		{"entries", 1 << 20, 3, 15, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			memoArena, memoEntries = c.arena, c.entries
			m := newRecordMemo()
			for i := range 20 {
				m.add(m.sum(raw(i)), raw(i), &schemas.Record{IdempotencyKey: fmt.Sprint(i)})
				for _, g := range m.gen {
					if len(g.arena) > memoArena || cap(g.arena) > memoArena || len(g.ents) > memoEntries || len(g.at) != len(g.ents) {
						t.Fatalf("after %d records: a generation of %d bytes (cap %d), %d entries, %d sums", i+1, len(g.arena), cap(g.arena), len(g.ents), len(g.at))
					}
				}
			}
			for i := range 20 {
				rec, ok := m.find(raw(i))
				if want := i >= c.oldest; ok != want || (ok && rec.IdempotencyKey != fmt.Sprint(i)) {
					t.Errorf("record %d: %+v, %v; want found=%v", i, rec, ok, want)
				}
			}
			if n := len(m.gen[0].ents) + len(m.gen[1].ents); n > c.maxEnts {
				t.Errorf("%d entries held, want at most %d", n, c.maxEnts)
			}
		})
	}
	memoArena = 10
	m := newRecordMemo()
	m.add(m.sum(raw(1)), raw(1), &schemas.Record{})
	if _, ok := m.find(raw(1)); ok {
		t.Error("a record larger than an arena was kept")
	}
}

// TestRunOutcomesOfJournalRecords: the executor's outcomes carry their
// journal records' bytes, which Run finds among the records it decoded
// (recordMemo) instead of decoding them again. It must still judge each
// outcome by its own bytes: one whose record was changed after the
// journal's (status failed, hash kept) is decoded and fails outcome_ids
// and once_per_key, exactly as Check (which keeps no memo) says.
func TestRunOutcomesOfJournalRecords(t *testing.T) {
	in := base(t)
	var outs []*kgo.Record
	for _, r := range in.Journal {
		rc, err := schemas.UnmarshalRecord(r.Value)
		if err != nil || rc.Status != schemas.StatusSucceeded {
			continue // the marker, in_progress records
		}
		for _, replayed := range []bool{false, true} {
			o, err := wire.EncodeOutcome(rc, rc.Command.ID, replayed)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(o.Value, r.Value) {
				t.Fatalf("outcome data is not the journal record's bytes:\n%s\n%s", o.Value, r.Value)
			}
			o.Topic, o.Partition, o.Offset = tops.Outcomes, pe, int64(len(outs))
			outs = append(outs, o)
		}
	}
	changed := *outs[len(outs)-1]
	changed.Value = bytes.Replace(changed.Value, []byte(`"status":"succeeded"`), []byte(`"status":"failed"`), 1)
	changed.Offset = int64(len(outs))
	in.Outcomes = append(outs, &changed)
	want := Check(in)
	if find(want, CheckOutcomeIDs).Count != 2 || find(want, CheckOncePerKey).Count != 1 || want.Counts.Republications != 2 {
		t.Fatalf("the changed outcome should fail outcome_ids twice (id not its own, id reused) and once_per_key once, the replays be republications: %+v %+v", want.Checks, want.Counts)
	}
	a := runHistory(t, in, want, 50)
	if a.memoHits != len(outs) {
		t.Errorf("%d outcomes found in the memo, want the %d unchanged ones", a.memoHits, len(outs))
	}
	// Whatever the chunks and the cores decoding them (so whichever
	// outcomes find their record in the memo), the report is Check's.
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	for _, cores := range []int{1, 2, 8} {
		for _, chunk := range []int{1, 7, 1024} {
			t.Run(fmt.Sprintf("cores=%d,chunk=%d", cores, chunk), func(t *testing.T) {
				runtime.GOMAXPROCS(cores)
				runHistory(t, in, want, chunk)
			})
		}
	}
}

// TestRecordMemoFindsOnlyItsBytes: find answers only for the exact bytes
// kept, in either generation. A sum is 64 bits of a non-cryptographic
// hash: bytes a tamperer shaped to share a kept record's sum (planted
// here under the other bytes' sum) must not take that record's facts.
func TestRecordMemoFindsOnlyItsBytes(t *testing.T) {
	m := newRecordMemo()
	kept := []byte(`{"idempotency_key":"k-1","status":"succeeded"}`)
	forged := []byte(`{"idempotency_key":"k-1","status":"failed"}`)
	m.add(m.sum(forged), kept, &schemas.Record{IdempotencyKey: "k-1", Status: schemas.StatusSucceeded})
	if rec, ok := m.find(forged); ok {
		t.Fatalf("bytes sharing a kept record's sum found %+v", rec)
	}
	other := []byte(`{"idempotency_key":"k-2","status":"succeeded"}`)
	m.add(m.sum(other), other, &schemas.Record{IdempotencyKey: "k-2", Status: schemas.StatusSucceeded})
	if rec, ok := m.find(other); !ok || rec.IdempotencyKey != "k-2" {
		t.Fatalf("the kept bytes: %+v, %v; want k-2's record", rec, ok)
	}
}
