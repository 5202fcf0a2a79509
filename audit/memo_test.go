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
// gives for a real entry, and a record differing in one member is decoded.
func TestDecodeOutcomeKnownRecord(t *testing.T) {
	samples := outcomeSamples(t)
	var tag memoTag
	for i, r := range samples[:len(samples)-1] { // the last one is not read by the fast path
		data := dataOf(t, r)
		rec, err := schemas.UnmarshalRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		m := newRecordMemo()
		m.tagOf(data, &tag)
		m.add(&tag, &rec)
		got, fromMemo, ok := decodeOutcomeFast(r, m, &tag, nil)
		if want := wantFacts(t, r); !ok || !fromMemo || got != want {
			t.Fatalf("sample %d: with its record in the memo: %+v, %v, %v; want %+v from the memo", i, got, fromMemo, ok, want)
		}
		planted := newRecordMemo()
		planted.tagOf(data, &tag)
		planted.add(&tag, &schemas.Record{IdempotencyKey: "planted", Status: schemas.StatusHeld})
		if got, _, ok := decodeOutcomeFast(r, planted, &tag, nil); !ok || got.key != "planted" || got.status != schemas.StatusHeld {
			t.Fatalf("sample %d: the memo's entry for its data was not used: %+v", i, got)
		}
	}
	// The record's bytes with one change (its hash member kept, as a
	// tamperer would): not the memo's record.
	r := samples[0]
	data := dataOf(t, r)
	m := newRecordMemo()
	changed := *r
	changed.Value = []byte(strings.Replace(string(r.Value), `"status":"succeeded"`, `"status":"failed"`, 1))
	m.tagOf(data, &tag)
	m.add(&tag, &schemas.Record{IdempotencyKey: "planted", Status: schemas.StatusHeld})
	got, fromMemo, ok := decodeOutcomeFast(&changed, m, &tag, nil)
	if want := wantFacts(t, &changed); !ok || fromMemo || got != want || got.status != schemas.StatusFailed {
		t.Fatalf("a changed record: %+v, %v, %v; want %+v, decoded", got, fromMemo, ok, want)
	}
}

// TestRecordMemoBound: the memo keeps the latest records, in two
// generations of at most memoBytes (as memoCost counts them) and
// memoEntries entries each, and forgets the older ones.
func TestRecordMemoBound(t *testing.T) {
	size, entries := memoBytes, memoEntries
	t.Cleanup(func() { memoBytes, memoEntries = size, entries })
	raw := func(i int) []byte { return fmt.Appendf(nil, `{"record":%04d}`, i) }
	rec := func(i int) *schemas.Record { return &schemas.Record{IdempotencyKey: fmt.Sprintf("%04d", i)} }
	cost := memoCost(rec(0)) // the same for every record here
	var tag memoTag
	for _, c := range []struct {
		name            string
		size, entries   int
		oldest, maxEnts int // the oldest of the 20 records still found; entries held at most
	}{
		{"bytes", 4 * cost, 1000, 12, 8},
		{"entries", 1 << 20, 3, 15, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			memoBytes, memoEntries = c.size, c.entries
			m := newRecordMemo()
			for i := range 20 {
				m.tagOf(raw(i), &tag)
				m.add(&tag, rec(i))
				for _, g := range m.gen {
					if g.bytes > memoBytes || len(g.ents) > memoEntries || cap(g.ents) > memoEntries || len(g.at) != len(g.ents) || g.bytes != len(g.ents)*cost {
						t.Fatalf("after %d records: a generation of %d bytes, %d entries, %d tags", i+1, g.bytes, len(g.ents), len(g.at))
					}
				}
			}
			for i := range 20 {
				got, ok := m.find(raw(i), &tag)
				if want := i >= c.oldest; ok != want || (ok && got.IdempotencyKey != fmt.Sprintf("%04d", i)) {
					t.Errorf("record %d: %+v, %v; want found=%v", i, got, ok, want)
				}
			}
			if n := len(m.gen[0].ents) + len(m.gen[1].ents); n > c.maxEnts {
				t.Errorf("%d entries held, want at most %d", n, c.maxEnts)
			}
		})
	}
	memoBytes = cost - 1
	m := newRecordMemo()
	m.tagOf(raw(1), &tag)
	m.add(&tag, rec(1))
	if _, ok := m.find(raw(1), &tag); ok {
		t.Error("a record costing more than a generation was kept")
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
// kept, in either generation: the executor's record with any one of its
// bytes changed, one byte short or one byte longer is not found (its tag
// covers every byte; recordMemo says why equal tags mean equal bytes).
func TestRecordMemoFindsOnlyItsBytes(t *testing.T) {
	m := newRecordMemo()
	var tag memoTag
	kept := dataOf(t, outcomeSamples(t)[0])
	m.tagOf(kept, &tag)
	m.add(&tag, &schemas.Record{IdempotencyKey: "kept", Status: schemas.StatusSucceeded})
	other := []byte(`{"idempotency_key":"k-2","status":"succeeded"}`)
	m.tagOf(other, &tag)
	m.add(&tag, &schemas.Record{IdempotencyKey: "k-2", Status: schemas.StatusSucceeded})
	for _, c := range []struct {
		raw  []byte
		want string
	}{{kept, "kept"}, {other, "k-2"}} {
		if rec, ok := m.find(c.raw, &tag); !ok || rec.IdempotencyKey != c.want {
			t.Fatalf("the kept bytes: %+v, %v; want %s's record", rec, ok, c.want)
		}
	}
	changed := bytes.Clone(kept)
	for i := range changed {
		for _, bit := range []byte{0x01, 0x80} {
			changed[i] ^= bit
			if rec, ok := m.find(changed, &tag); ok {
				t.Fatalf("byte %d changed (^%#x): found %+v", i, bit, rec)
			}
			changed[i] = kept[i]
		}
	}
	for _, b := range [][]byte{kept[:len(kept)-1], append(bytes.Clone(kept), ' '), kept[1:]} {
		if rec, ok := m.find(b, &tag); ok {
			t.Fatalf("%d bytes for %d: found %+v", len(b), len(kept), rec)
		}
	}
}
