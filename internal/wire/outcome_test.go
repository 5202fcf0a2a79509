package wire

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

var updateOutcomes = flag.Bool("update-outcomes", false, "rewrite testdata/outcomes.golden from the current encoder")

// outcomeShapes are records of every shape an outcome carries: each
// status, data and result canonical or not (unsorted keys, spaces,
// escapes, non-ASCII and UTF-16-ordered keys, numbers JCS rewrites,
// duplicates), errors, evidence, decisions, deadlines, trace context.
func outcomeShapes() []schemas.Record {
	t0 := time.Date(2026, 12, 6, 3, 4, 5, 123456789, time.UTC)
	t1 := t0.Add(1500 * time.Millisecond)
	off := int64(41)
	datas := []string{"", `{"amount":1250,"currency":"EUR"}`, `{"currency":"EUR","amount":1250}`,
		`{ "a" : [1, 2.50, 1e3, -0, 0.1] }`, `{"s":"tab\there \u00e9 \"q\" \\ \u2028","u":"é€😀"}`,
		`{"\u20ac":1,"😀":2,"ﬀ":3}`, `{"a":1,"a":2}`, `[true,false,null,{"z":{},"y":[]}]`, `"text"`, `12345678901234567890`,
		`null`, `{"n":-12,"m":0,"k":9007199254740993}`, `{"deep":{"deeper":{"deepest":[[[{"x":"y"}]]]}}}`,
		`{"ctl":"\u0001\u001f\b\f"}`, `{"big":1E400}`}
	results := []string{"", `{"noop":true}`, `{"b":1,"a":2}`, `[1.0]`, `null`, `{"id":"ch_1","status":"ok"}`}
	statuses := []schemas.Status{schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusUnresolved,
		schemas.StatusRejected, schemas.StatusHeld, schemas.StatusInProgress}
	var out []schemas.Record
	for i, d := range datas {
		for j, res := range results {
			st := statuses[(i+j)%len(statuses)]
			r := schemas.Record{
				IdempotencyKey: fmt.Sprintf("key-%d-%d", i, j), Entity: "order-" + strings.Repeat("x", j),
				Action: "charge", Status: st, Fingerprint: "sha256:abc", Attempts: j, EntityVersion: int64(i),
				Command:  schemas.CommandRef{ID: fmt.Sprintf("cmd-%d", i), Source: "/shop", Partition: int32(j), Offset: int64(i * 100)},
				Executor: "exec-1", Epoch: 3, PrevHash: "sha256:prev", Hash: "sha256:hash",
			}
			if d != "" {
				r.Data = json.RawMessage(d)
			}
			if res != "" {
				r.Result = json.RawMessage(res)
			}
			if (i+j)%2 == 0 {
				r.StartedAt, r.FinishedAt = &t0, &t1
			}
			if st == schemas.StatusFailed || st == schemas.StatusUnresolved || st == schemas.StatusRejected {
				r.Error = &schemas.Error{Code: schemas.CodeConnectorRejected, Message: "declined: \"card\" <expired>\n"}
			}
			if j%3 == 1 {
				r.Evidence = []schemas.Evidence{{Kind: "attempt", Attempt: 1, At: t0, EndedAt: &t1, Answer: "ok", Detail: "200 OK"},
					{Kind: "confirmation", Attempt: 2, FencingToken: 7, At: t1, Answer: "unknown", By: schemas.ByExecutor}}
				r.EvidenceDropped = j
				r.FencingToken = 7
			}
			if j%3 == 2 {
				r.Resolution = &schemas.Resolution{By: "ops@example.com", At: t1, Reason: "checked", As: schemas.StatusSucceeded, DecisionID: "dec-1", Offset: &off}
				r.Deadline = &t1
				r.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
				r.UniqueKey = "u1"
				r.EstablishedBy = "confirmation"
			}
			if i%4 == 3 {
				r.Release = &schemas.Resolution{By: "ops", At: t0, Reason: "free it", As: st}
			}
			out = append(out, r)
		}
	}
	return out
}

// TestEncodeOutcomeGolden pins EncodeOutcome's bytes, as they were before
// the encoder learned to copy data and result that are canonical already
// (and to write the record straight into the event): for every shape, as
// a repeat under another command id, as a republication, and as the
// settlement's answer. The golden file was written by the encoder before
// that change (-update-outcomes).
func TestEncodeOutcomeGolden(t *testing.T) {
	var got bytes.Buffer
	for _, rec := range outcomeShapes() {
		if rec.FinishedAt == nil {
			t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			rec.FinishedAt = &t0 // EncodeOutcome would take the time of now
		}
		for _, c := range []struct {
			cause    string
			replayed bool
		}{{"other-cmd", true}, {rec.Command.ID, false}} {
			r, err := EncodeOutcome(rec, c.cause, c.replayed)
			if err != nil {
				fmt.Fprintf(&got, "%s %s: error %v\n", rec.IdempotencyKey, c.cause, err)
				continue
			}
			fmt.Fprintf(&got, "%s %s %s\n", r.Key, r.Headers, r.Value)
		}
	}
	const golden = "testdata/outcomes.golden"
	if *updateOutcomes {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		g, w := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("line %d differs:\n got %s\nwant %s", i+1, g[i], w[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(g), len(w))
	}
}

// TestEncodeOutcomeAllocs: an outcome is encoded into one buffer sized
// for it: no allocation beyond the event's own (EncodeOutcomeData's)
// and the encoder's into a buffer that never grows, for records of every
// shape (a repeat's answer is encoded here).
func TestEncodeOutcomeAllocs(t *testing.T) {
	for _, rec := range append(goldenJournal(t), outcomeShapes()[:20]...) {
		data, err := appendRecordJSON(nil, &rec)
		if err != nil {
			continue
		}
		enc := testing.AllocsPerRun(20, func() { _, _ = appendRecordJSON(make([]byte, 0, 8192), &rec) }) - 1
		ev := testing.AllocsPerRun(20, func() { EncodeOutcomeData(&rec, data, "cmd-x", true) })
		if n := testing.AllocsPerRun(20, func() { _, _ = EncodeOutcome(rec, "cmd-x", true) }); n > ev+enc {
			t.Errorf("EncodeOutcome of %s: %.0f allocations, want at most %.0f (the event's %.0f and the encoder's %.0f)", rec.IdempotencyKey, n, ev+enc, ev, enc)
		}
	}
}

// TestOutcomeRecordOneObject: an outcome event is its value's buffer, its
// id and one object for the Kafka record and its header (the key in the
// buffer's spare room, the header's value shared): a repeat's answer is
// one of these. Key and value cannot grow into each other.
func TestOutcomeRecordOneObject(t *testing.T) {
	recs := goldenJournal(t)
	rec := recs[len(recs)-1]
	r, err := EncodeOutcome(rec, "cmd-x", true)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Key) != rec.Entity || cap(r.Key) != len(r.Key) || cap(r.Value) != len(r.Value) {
		t.Fatalf("key %q (cap %d), value cap %d of len %d", r.Key, cap(r.Key), cap(r.Value), len(r.Value))
	}
	if len(r.Headers) != 1 || r.Headers[0].Key != headerContentType || string(r.Headers[0].Value) != "application/cloudevents+json" {
		t.Fatalf("headers %v", r.Headers)
	}
	if n := testing.AllocsPerRun(50, func() { _, _ = EncodeOutcome(rec, "cmd-x", true) }); n > 2 {
		t.Errorf("EncodeOutcome: %.0f allocations, want 2 (value and record; the id is written in place)", n)
	}
	long := rec
	long.Entity = strings.Repeat("e", 4096) // past the buffer's spare room: a key of its own
	if r, err := EncodeOutcome(long, "cmd-x", true); err != nil || string(r.Key) != long.Entity {
		t.Fatalf("long entity: %v, key of %d bytes", err, len(r.Key))
	}
}

// BenchmarkEncodeOutcome prices a repeat's answer for a record of the
// usual shape (golden journal, with evidence).
func BenchmarkEncodeOutcome(b *testing.B) {
	recs := goldenJournal(&testing.T{})
	rec := recs[len(recs)-1]
	rec.Data = json.RawMessage(`{"amount":1250,"currency":"EUR","customer":"cus_0042","items":[{"qty":2,"sku":"sku-1"},{"qty":1,"sku":"sku-7"}],"order":"order-1042","reason":"customer request for a refund"}`)
	for b.Loop() {
		if _, err := EncodeOutcome(rec, "cmd-x", true); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSealOutcomeSameBytes: a record sealed straight into its outcome
// event is sealed as SealRecord seals it (same bytes, same hash), and the
// event is EncodeOutcomeData's around those bytes, for records of every
// shape, as a repeat and as an answer; the record's bytes cannot grow into
// the event, nor the event into its key.
func TestSealOutcomeSameBytes(t *testing.T) {
	for _, rec := range append(goldenJournal(t), outcomeShapes()...) {
		if rec.FinishedAt == nil {
			t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			rec.FinishedAt = &t0 // else the event's time is now
		}
		for _, c := range []struct {
			cause    string
			replayed bool
		}{{"other-cmd", true}, {rec.Command.ID, false}} {
			want, got := rec, rec
			wantRaw, err := SealRecord(&want)
			// The committer writes the head before it chains the record.
			got.PrevHash = ""
			head := OutcomeHead(&got, c.cause, c.replayed)
			got.PrevHash = rec.PrevHash
			event, raw, err2 := SealOutcome(head, &got)
			if (err == nil) != (err2 == nil) {
				t.Fatalf("%s: SealRecord error %v, SealOutcome error %v", rec.IdempotencyKey, err, err2)
			}
			if err != nil {
				continue
			}
			if got.Hash != want.Hash || !bytes.Equal(raw, wantRaw) {
				t.Fatalf("%s: sealed\n %s (%s)\nwant\n %s (%s)", rec.IdempotencyKey, raw, got.Hash, wantRaw, want.Hash)
			}
			wantEv := EncodeOutcomeData(&want, wantRaw, c.cause, c.replayed)
			ev := OutcomeRecord(&got, event)
			if !bytes.Equal(ev.Value, wantEv.Value) || !bytes.Equal(ev.Key, wantEv.Key) || fmt.Sprint(ev.Headers) != fmt.Sprint(wantEv.Headers) {
				t.Fatalf("%s: event\n %s %s\nwant\n %s %s", rec.IdempotencyKey, ev.Key, ev.Value, wantEv.Key, wantEv.Value)
			}
			if cap(raw) != len(raw) || cap(ev.Value) != len(ev.Value) || cap(ev.Key) != len(ev.Key) {
				t.Fatalf("%s: caps raw %d/%d value %d/%d key %d/%d", rec.IdempotencyKey, len(raw), cap(raw), len(ev.Value), cap(ev.Value), len(ev.Key), cap(ev.Key))
			}
		}
	}
}

// TestSealOutcomeAllocs: a new key's record and outcome event are one
// buffer (and the hash's string), the outcome's key in its spare room,
// a buffer that does not grow when the record is chained after its head
// was written: fewer allocations than sealing and then encoding the event
// apart.
func TestSealOutcomeAllocs(t *testing.T) {
	rec := noopRecord()
	apart := testing.AllocsPerRun(50, func() {
		r := rec
		raw, _ := SealRecord(&r)
		OutcomeRecord(&r, EncodeOutcomeData(&r, raw, "cmd-x", false).Value)
	})
	one := testing.AllocsPerRun(50, func() {
		r := rec
		r.PrevHash = ""
		head := OutcomeHead(&r, "cmd-x", false) // before the record is chained
		r.PrevHash = rec.PrevHash
		ev, _, _ := SealOutcome(head, &r)
		OutcomeRecord(&r, ev)
	})
	if one > apart-1 || one > 3 {
		t.Errorf("SealOutcome and its record: %.0f allocations, apart %.0f; want 3 (buffer, hash, record)", one, apart)
	}
}

// TestIsOutcomeIDOf: IsOutcomeIDOf agrees with OutcomeIDOf, a settlement's
// decision id included, refuses any other id (one character changed, one
// short, one longer), and allocates nothing.
func TestIsOutcomeIDOf(t *testing.T) {
	recs := []schemas.Record{
		{IdempotencyKey: "k-1", Status: schemas.StatusSucceeded, Command: schemas.CommandRef{ID: "c-1"}},
		{IdempotencyKey: "k-2", Status: schemas.StatusFailed, Command: schemas.CommandRef{ID: "c-2"},
			Resolution: &schemas.Resolution{As: schemas.StatusFailed, DecisionID: "d-2"}},
	}
	for _, rec := range recs {
		for _, causation := range []string{rec.Command.ID, "other"} {
			id := OutcomeIDOf(&rec, causation)
			if !IsOutcomeIDOf(id, &rec, causation) {
				t.Fatalf("%s, causation %s: its id %s refused", rec.IdempotencyKey, causation, id)
			}
			changed := []byte(id)
			changed[len(changed)-1] ^= 1
			for _, other := range []string{string(changed), id[:len(id)-1], id + "0", ""} {
				if IsOutcomeIDOf(other, &rec, causation) {
					t.Fatalf("%s, causation %s: %q accepted for %q", rec.IdempotencyKey, causation, other, id)
				}
			}
			if n := testing.AllocsPerRun(20, func() { IsOutcomeIDOf(id, &rec, causation) }); n > 0 {
				t.Errorf("%.0f allocations, want none", n)
			}
		}
	}
}
