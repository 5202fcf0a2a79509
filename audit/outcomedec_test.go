package audit

import (
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
		got, _, ok := decodeOutcomeFast(r, nil, nil, nil)
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
		got, _, ok := decodeOutcomeFast(r, nil, nil, nil)
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
