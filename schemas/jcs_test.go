package schemas_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	gowebpki "github.com/gowebpki/jcs"

	"github.com/onceflight/onceflight/internal/wire"
	. "github.com/onceflight/onceflight/schemas"
)

// A record's bytes are its RFC 8785 form, and its hash is SHA-256 of the
// RFC 8785 form of json.Marshal's encoding without "hash", as computed by
// an independent JCS library: an outside auditor gets the same answer.
func TestRecordHashIsJCS(t *testing.T) {
	for _, rec := range []Record{testRecord(), htmlRecord(), {IdempotencyKey: "k\x01\u2028\xff", Status: StatusRejected,
		Data: json.RawMessage(`{"z":[1.50,-0,1e21],"a":"\ud83d\ude00","\ue000":1,"😀":2}`), Result: json.RawMessage(`{"b":1,"a":2}`),
		Command: CommandRef{Offset: 1 << 60}}} {
		rec.PrevHash = "sha256:prev"
		sealed := rec
		raw, err := wire.SealRecord(&sealed)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(sealed)
		if err != nil {
			t.Fatal(err)
		}
		wantJCS, err := gowebpki.Transform(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, wantJCS) {
			t.Errorf("record bytes\n%s\nJCS of json.Marshal\n%s", raw, wantJCS)
		}
		sealed.Hash = ""
		noHash, _ := json.Marshal(sealed)
		var m map[string]any
		_ = json.Unmarshal(noHash, &m)
		delete(m, "hash")
		noHash, _ = json.Marshal(m)
		canon, err := gowebpki.Transform(noHash)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(canon)
		wantHash := "sha256:" + hex.EncodeToString(sum[:])
		got, err := wire.RecordHash(raw)
		if err != nil || got != wantHash {
			t.Errorf("RecordHash = %s, %v; JCS library says %s", got, err, wantHash)
		}
		if h, _ := hashRecord("sha256:prev", rec); h != wantHash {
			t.Errorf("HashRecord = %s, want %s", h, wantHash)
		}
	}
}

// The outcome event written by hand decodes, through sdk-go, to what the
// sdk-go writer would have said.
func TestEncodeOutcomeDataDecodes(t *testing.T) {
	rec := htmlRecord()
	rec.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	data, err := wire.MarshalRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	r := wire.EncodeOutcomeData(&rec, data, "cmd \"1\"", true)
	o, err := DecodeOutcome(r)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.Value)
	}
	ev, err := ToEvent(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
	if !ev.Time().Equal(*rec.FinishedAt) || ev.Extensions()[ExtTraceParent] != rec.TraceParent {
		t.Errorf("time %v, traceparent %v", ev.Time(), ev.Extensions()[ExtTraceParent])
	}
	if o.ID != OutcomeID(rec.IdempotencyKey, rec.Status, `cmd "1"`) || o.CausationID != `cmd "1"` || !o.Replayed ||
		o.Subject != rec.Entity || o.IdempotencyKey != rec.IdempotencyKey || o.Type != OutcomeTypePrefix+string(rec.Status) {
		t.Errorf("decoded %+v", o)
	}
	back, _ := wire.MarshalRecord(o.Record)
	if !bytes.Equal(back, data) || string(r.Key) != rec.Entity {
		t.Errorf("data %s\nwant %s", back, data)
	}
}

// FuzzDecodeRecordFast: where the reflection-free decoder answers, it
// answers exactly what encoding/json does.
func FuzzDecodeRecordFast(f *testing.F) {
	addRecordSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		var fast Record
		if !DecodeRecordFast(in, &fast) {
			return
		}
		var want Record
		if err := json.Unmarshal(in, &want); err != nil {
			t.Fatalf("fast decoder accepted %q, encoding/json: %v", in, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("decode %q\nfast %+v\njson %+v", in, fast, want)
		}
	})
}

// addRecordSeeds adds records of every shape the encoder writes, and a few
// it does not, to a record decoder's fuzz corpus.
func addRecordSeeds(f *testing.F) {
	settled := testRecord()
	settled.Resolution = &Resolution{By: "ann", At: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Reason: "checked", As: StatusSucceeded, DecisionID: "ctl-1"}
	settled.Release = &Resolution{By: "bob", At: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Reason: "again", As: StatusSucceeded}
	positioned := settled
	off := int64(1250)
	positioned.Release = &Resolution{By: "bob", At: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Reason: "again", As: StatusSucceeded, DecisionID: "rel-1", Offset: &off}
	f.Add([]byte(`{"release":{"offset":null,"by":"x"}}`))
	f.Add([]byte(`{"evidence":[{"answer":"ambiguous","at":"2026-12-02T01:00:00Z","attempt":1} , {"kind":"confirm","ended_at":null}],"evidence_dropped":3}`))
	f.Add([]byte(`{"evidence":[],"established_by":null}`))
	for _, rec := range []Record{testRecord(), htmlRecord(), settled, positioned, evidenceRecord(), {}} {
		b, _ := wire.MarshalRecord(rec)
		f.Add(b)
		j, _ := json.Marshal(rec)
		f.Add(j)
	}
	f.Add([]byte(`{"status":null,"error":null,"result":null,"command":{"offset":-0},"Entity":"x"}`))
	f.Add([]byte(`{"attempts":1.0,"entity":"a","entity":"b","finished_at":"2025-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"fingerprint":1,"status":"succeeded"}`))
	for _, v := range []string{`{"a":01}`, `[1,]`, `{"a" 1}`, `-`, `1.`, `1e`, `-0.5E+7`, `tru`, `[[[{"x":[null,true,false]}]]]`, `{"a":1,"a":2}`, `{}`, `[]`, ` 7 `, `"\u12"`, `{"a":"b",}`} {
		f.Add([]byte(`{"data":` + v + `,"result":` + v + `,"status":"failed"}`))
	}
	f.Add([]byte(`{"started_at":"yesterday","status":"succeeded"}`))
	f.Add([]byte(`{"evidence":[{"at":"2026-12-02T01:00:00Z","detail":"\u00e9\ud800"}],"data":{"a":[1,2,{"b":null}]},"executor":"x\n"}`))
}

func TestDecodeRecordFastTakesOwnEncoding(t *testing.T) {
	for _, rec := range []Record{testRecord(), htmlRecord(), evidenceRecord()} {
		b, _ := wire.SealRecord(&rec)
		var got Record
		if !DecodeRecordFast(b, &got) {
			t.Fatalf("fast decoder declined %s", b)
		}
		again, _ := wire.MarshalRecord(got)
		if !bytes.Equal(again, b) {
			t.Fatalf("round trip\n%s\nwant\n%s", again, b)
		}
	}
}

// TestRecordHashGolden pins the hash scheme: a change of the encoder, the
// canonical form or the chaining changes these values, and every journal
// already written would fail its audit. Recompute only with a migration.
func TestRecordHashGolden(t *testing.T) {
	rec := testRecord()
	for _, c := range []struct{ prev, want string }{
		{"", "sha256:3c52fc2385ffc44ad3b919cbceb6efa2661c5550b3157c4f7081b4d7166a420a"},
		{"sha256:prev", "sha256:1b1c8c0217e30b088a37ba33b829288a1b5291e70ab0e4261834c8856ae4afd7"},
	} {
		h, err := hashRecord(c.prev, rec)
		if err != nil {
			t.Fatal(err)
		}
		if h != c.want {
			t.Errorf("hashRecord(%q, testRecord()) = %s, golden %s", c.prev, h, c.want)
		}
	}
}
