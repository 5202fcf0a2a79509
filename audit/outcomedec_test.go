package audit

import (
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// outcomeSamples are outcome events as the executor writes them, in the
// shapes EncodeOutcomeData has: with and without subject, causation, key,
// trace parent; replayed; a settlement; an error; a result.
func outcomeSamples(t testing.TB) []*kgo.Record {
	t.Helper()
	fin := t0.Add(time.Second)
	recs := []struct {
		rec       schemas.Record
		causation string
		replayed  bool
	}{
		{schemas.Record{IdempotencyKey: "k1", Entity: "order-1", Status: schemas.StatusSucceeded, Attempts: 1, FinishedAt: &fin,
			Command: schemas.CommandRef{ID: "c1", Partition: 2, Offset: 7}, Result: json.RawMessage(`{"ok":true}`)}, "c1", false},
		{schemas.Record{IdempotencyKey: "k1", Entity: "order-1", Status: schemas.StatusSucceeded, FinishedAt: &fin,
			Command: schemas.CommandRef{ID: "c1"}}, "c2", true},
		{schemas.Record{Status: schemas.StatusRejected, Error: &schemas.Error{Code: schemas.CodeUnknownAction, Message: "no such action"}}, "", false},
		{schemas.Record{IdempotencyKey: "ключ", Entity: "é", Status: schemas.StatusFailed, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			Command: schemas.CommandRef{ID: "c3"}}, "c3", false},
		{schemas.Record{IdempotencyKey: "k4", Entity: "order-4", Status: schemas.StatusSucceeded,
			Command:    schemas.CommandRef{ID: "c4"},
			Resolution: &schemas.Resolution{By: "ann", At: t0, As: schemas.StatusSucceeded, DecisionID: "d1"}}, "c4", false},
		{schemas.Record{IdempotencyKey: `quote"d`, Entity: "order-5", Status: schemas.StatusSucceeded, Command: schemas.CommandRef{ID: "c5"}}, "c5", false},
	}
	var out []*kgo.Record
	for _, c := range recs {
		r, err := wire.EncodeOutcome(c.rec, c.causation, c.replayed)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestDecodeOutcomeFast: the fast path reads the executor's outcomes (all
// but the one with an escaped string) and gives the facts of
// DecodeOutcome's result, the settlement's decision and a wrong id's
// deterministic one included.
func TestDecodeOutcomeFast(t *testing.T) {
	samples := outcomeSamples(t)
	wrongID := *samples[0]
	wrongID.Value = []byte(strings.Replace(string(wrongID.Value), `"id":"`, `"id":"0`, 1))
	samples = append([]*kgo.Record{&wrongID}, samples...)
	for i, r := range samples {
		want := wantFacts(t, r)
		got, _, ok := decodeOutcomeFast(r, nil)
		if escaped := i == len(samples)-1; ok == escaped {
			t.Fatalf("sample %d: fast path ok=%v, want %v:\n%s", i, ok, !escaped, r.Value)
		}
		if ok && got != want {
			t.Fatalf("sample %d: fast path gave\n%+v\nDecodeOutcome gave\n%+v", i, got, want)
		}
	}
	if f := wantFacts(t, samples[0]); f.idOK || f.wantID == "" {
		t.Errorf("an outcome whose id was changed: %+v", f)
	}
	if f := wantFacts(t, samples[5]); f.decision != "d1" {
		t.Errorf("the settlement's decision: %+v", f)
	}
}

// wantFacts is what DecodeOutcome reads of r, as outcomeFacts.
func wantFacts(t *testing.T, r *kgo.Record) outcomeFacts {
	t.Helper()
	o, err := schemas.DecodeOutcome(r)
	if err != nil {
		t.Fatal(err)
	}
	return factsOf(o.ID, o.CausationID, &o.Record)
}

// FuzzDecodeOutcomeFast: whatever the bytes, the fast path either declines
// or gives exactly the facts of what DecodeOutcome gives; it never accepts what
// DecodeOutcome refuses, and never panics.
func FuzzDecodeOutcomeFast(f *testing.F) {
	for _, r := range outcomeSamples(f) {
		f.Add(r.Value)
	}
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"onceflight","type":"onceflight.execution.succeeded","datacontenttype":"application/json","time":"2026-01-02T03:04:05Z","replayed":false,"data":{}}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		r := &kgo.Record{Value: value, Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
		got, _, ok := decodeOutcomeFast(r, nil)
		if !ok {
			return
		}
		o, err := schemas.DecodeOutcome(r)
		if err != nil {
			t.Fatalf("fast path accepted what DecodeOutcome refuses (%v):\n%s", err, value)
		}
		if want := factsOf(o.ID, o.CausationID, &o.Record); got != want {
			t.Fatalf("fast path gave\n%+v\nDecodeOutcome gave\n%+v\nfor\n%s", got, want, value)
		}
	})
}

// dataOf is the bytes of outcome event r's data member: the record's JSON.
func dataOf(t *testing.T, r *kgo.Record) []byte {
	t.Helper()
	i := strings.Index(string(r.Value), `,"data":`)
	if i < 0 {
		t.Fatalf("no data in %s", r.Value)
	}
	return r.Value[i+len(`,"data":`) : len(r.Value)-1]
}

// TestDecodeOutcomeKnownRecord: an outcome whose data has the bytes of a
// record in the memo takes that record's facts instead of decoding it
// (a planted entry shows the lookup is made), gives exactly the facts a
// decode gives for a real entry, and a byte of difference is decoded.
func TestDecodeOutcomeKnownRecord(t *testing.T) {
	samples := outcomeSamples(t)
	for i, r := range samples[:len(samples)-1] { // the last one is not read by the fast path
		data := dataOf(t, r)
		rec, err := schemas.UnmarshalRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		m := newRecordMemo(4)
		m.add(sha256.Sum256(data), recordFactsOf(&rec))
		got, _, ok := decodeOutcomeFast(r, m)
		if want := wantFacts(t, r); !ok || got != want {
			t.Fatalf("sample %d: with its record in the memo: %+v, %v; want %+v", i, got, ok, want)
		}
		planted := newRecordMemo(4)
		planted.add(sha256.Sum256(data), recordFacts{key: "planted", status: schemas.StatusHeld})
		if got, _, ok := decodeOutcomeFast(r, planted); !ok || got.key != "planted" || got.status != schemas.StatusHeld {
			t.Fatalf("sample %d: the memo's entry for its data was not used: %+v", i, got)
		}
	}
	// The record's bytes with one change (its hash member kept, as a
	// tamperer would): not the memo's record.
	r := samples[0]
	data := dataOf(t, r)
	m := newRecordMemo(4)
	m.add(sha256.Sum256(data), recordFacts{key: "planted", status: schemas.StatusHeld})
	changed := *r
	changed.Value = []byte(strings.Replace(string(r.Value), `"status":"succeeded"`, `"status":"failed"`, 1))
	got, _, ok := decodeOutcomeFast(&changed, m)
	if want := wantFacts(t, &changed); !ok || got != want || got.status != schemas.StatusFailed {
		t.Fatalf("a changed record: %+v, %v; want %+v", got, ok, want)
	}
}

// TestRecordMemoBound: the memo keeps the latest max to 2·max records
// and forgets the older ones.
func TestRecordMemoBound(t *testing.T) {
	m := newRecordMemo(3)
	sum := func(i int) [sha256.Size]byte { return sha256.Sum256([]byte{byte(i)}) }
	for i := range 10 {
		m.add(sum(i), recordFacts{partition: int32(i)})
	}
	for i := range 10 {
		rf, ok := m.get(sum(i))
		if want := i >= 6; ok != want || (ok && rf.partition != int32(i)) {
			t.Errorf("record %d: %+v, %v; want found=%v", i, rf, ok, want)
		}
	}
	if n := len(m.cur) + len(m.old); n > 2*3 {
		t.Errorf("%d entries, more than 2·max", n)
	}
	m.reset()
	if _, ok := m.get(sum(9)); ok {
		t.Error("found after reset")
	}
}
