package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

var canonSeeds = []string{
	`{"b":1,"a":[true,false,null]}`, " {\n\"a\" : 1.50 , \"c\":{\"z\":1,\"y\":2}}\t",
	`"\u00e9\u0041\/<>&\u2028"`, `"\u0001\n\b\f"`, `1e3`, `{}`, `[]`, `-0`, `0.0`, `1E-7`, `123456789012345678`,
	`{"a":1,"a":2}`, `"\ud800"`, `"\ud83d\ude00"`, `"\udc00\ud800x"`, "\"\xff\"", `{"\ud83d\ude00":1,"\ue000":2}`,
	`[1,]`, `{"a":1}x`, `NaN`, `1e400`, `{"hash":"x","a":1}`, `[[[[]]]]`, `{"a":{"b":[1,{"c":"d"}]}}`,
}

// FuzzCanonicalV1MatchesReference: the byte-level parser writes exactly
// what the round-1 encoding/json canonicalizer wrote, and fails where it
// failed, so no stored fingerprint changes.
func FuzzCanonicalV1MatchesReference(f *testing.F) {
	for _, s := range canonSeeds {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, strict bool) {
		got, err := canonical(in, strict)
		want, werr := canonicalReference(in, strict)
		if (err == nil) != (werr == nil) {
			t.Fatalf("canonical(%q, %v): err %v, reference err %v", in, strict, err, werr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("canonical(%q, %v) = %q, reference %q", in, strict, got, want)
		}
	})
}

// FuzzJCSMatchesLibrary: JCS agrees with gowebpki/jcs, a maintained
// RFC 8785 implementation, on every input both accept.
func FuzzJCSMatchesLibrary(f *testing.F) {
	for _, s := range canonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := canonicalJCS(in)
		if err != nil || !utf8Clean(in) {
			return
		}
		want, werr := jcs.Transform(in)
		if werr != nil {
			return // the library is stricter in places (e.g. top-level scalars)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("canonicalJCS(%q) = %q, gowebpki/jcs %q", in, got, want)
		}
	})
}

// utf8Clean: the library does not replace invalid UTF-8 or lone surrogates
// as encoding/json does, so those inputs are compared elsewhere.
func utf8Clean(in []byte) bool {
	return !bytes.Contains(in, []byte(`\u`)) && bytes.Equal(bytes.ToValidUTF8(in, nil), in)
}

func TestJCSVectors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		// RFC 8785 §3.2.2.3 and appendix B.
		{`[0, -0, 1.0, 1e21, 1e20, 1e-6, 1e-7, 0.1, 333333333.33333329, 1E30, 4.50, 2e-3, 0.000001, 9007199254740993]`,
			`[0,0,1,1e+21,100000000000000000000,0.000001,1e-7,0.1,333333333.3333333,1e+30,4.5,0.002,0.000001,9007199254740992]`},
		{`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{`"\u0008\u000c\u001f\u007f\u2028"`, "\"\\b\\f\\u001f\u007f\u2028\""},
		{`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
	} {
		got, err := canonicalJCS([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("canonicalJCS(%s)\n got %s, %v\nwant %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`1e400`, `{"a":1,"a":2}`, `[1,]`, ``} {
		if got, err := canonicalJCS([]byte(bad)); err == nil {
			t.Errorf("canonicalJCS(%q) = %s, want error", bad, got)
		}
	}
}

func TestES6Numbers(t *testing.T) {
	for _, f := range []float64{1, -1, 0.1, 1e21, 1e-7, 123e-20, math.MaxFloat64, 5e-324, 1.5, 100, 1e6} {
		got := string(appendES6Number(nil, f))
		back, err := strconv.ParseFloat(got, 64)
		if err != nil || back != f {
			t.Errorf("%v written as %s, reads back as %v (%v)", f, got, back, err)
		}
		want, _ := json.Marshal(f) // encoding/json also writes ES6 forms
		if got != string(want) {
			t.Errorf("%v: %s, encoding/json %s", f, got, want)
		}
	}
}

// A record's bytes are its RFC 8785 form, and its hash is SHA-256 of the
// RFC 8785 form of json.Marshal's encoding without "hash", as computed by
// an independent JCS library: an outside auditor gets the same answer.
func TestRecordHashIsJCS(t *testing.T) {
	for _, rec := range []Record{testRecord(), htmlRecord(), {IdempotencyKey: "k\x01\u2028\xff", Status: StatusRejected,
		Data: json.RawMessage(`{"z":[1.50,-0,1e21],"a":"\ud83d\ude00","\ue000":1,"😀":2}`), Result: json.RawMessage(`{"b":1,"a":2}`),
		Command: CommandRef{Offset: 1 << 60}}} {
		rec.PrevHash = "sha256:prev"
		sealed := rec
		raw, err := SealRecord(&sealed)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(sealed)
		if err != nil {
			t.Fatal(err)
		}
		wantJCS, err := jcs.Transform(want)
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
		canon, err := jcs.Transform(noHash)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(canon)
		wantHash := "sha256:" + hex.EncodeToString(sum[:])
		got, err := RecordHash(raw)
		if err != nil || got != wantHash {
			t.Errorf("RecordHash = %s, %v; JCS library says %s", got, err, wantHash)
		}
		if h, _ := HashRecord("sha256:prev", rec); h != wantHash {
			t.Errorf("HashRecord = %s, want %s", h, wantHash)
		}
	}
}

// The outcome event written by hand decodes, through sdk-go, to what the
// sdk-go writer would have said.
func TestEncodeOutcomeDataDecodes(t *testing.T) {
	rec := htmlRecord()
	rec.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	data, err := appendRecordJSON(nil, &rec)
	if err != nil {
		t.Fatal(err)
	}
	r := EncodeOutcomeData(&rec, data, "cmd \"1\"", true)
	o, err := DecodeOutcome(r)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.Value)
	}
	ev, err := toEvent(r)
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
	back, _ := appendRecordJSON(nil, &o.Record)
	if !bytes.Equal(back, data) || string(r.Key) != rec.Entity {
		t.Errorf("data %s\nwant %s", back, data)
	}
}

// FuzzDecodeRecordFast: where the reflection-free decoder answers, it
// answers exactly what encoding/json does.
func FuzzDecodeRecordFast(f *testing.F) {
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
		b, _ := appendRecordJSON(nil, &rec)
		f.Add(b)
		j, _ := json.Marshal(rec)
		f.Add(j)
	}
	f.Add([]byte(`{"status":null,"error":null,"result":null,"command":{"offset":-0},"Entity":"x"}`))
	f.Add([]byte(`{"attempts":1.0,"entity":"a","entity":"b","finished_at":"2025-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var fast Record
		if !decodeRecordFast(in, &fast) {
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

func TestDecodeRecordFastTakesOwnEncoding(t *testing.T) {
	for _, rec := range []Record{testRecord(), htmlRecord(), evidenceRecord()} {
		b, _ := SealRecord(&rec)
		var got Record
		if !decodeRecordFast(b, &got) {
			t.Fatalf("fast decoder declined %s", b)
		}
		again, _ := appendRecordJSON(nil, &got)
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
		h, err := HashRecord(c.prev, rec)
		if err != nil {
			t.Fatal(err)
		}
		if h != c.want {
			t.Errorf("HashRecord(%q, testRecord()) = %s, golden %s", c.prev, h, c.want)
		}
	}
}

// TestSealRecordAllocs: sealing allocates the sealed bytes once and the
// hash string beside what the encoder needs, nothing more (no growth of the buffer, no second copy),
// for records of the usual shapes: the executor seals one per answer.
func TestSealRecordAllocs(t *testing.T) {
	for _, rec := range []Record{testRecord(), htmlRecord(), evidenceRecord()} {
		r := rec
		raw, err := SealRecord(&r)
		if err != nil {
			t.Fatal(err)
		}
		if c := cap(raw); c > 2*len(raw) {
			t.Errorf("sealed %d bytes into a buffer of %d: the estimate carries too much slack", len(raw), c)
		}
		// The encoder's own allocations (canonicalizing data and result)
		// into a buffer that never grows, plus the hash string.
		enc := testing.AllocsPerRun(50, func() { appendRecord(make([]byte, 0, 8192), &rec, false) })
		if n := testing.AllocsPerRun(50, func() { r := rec; _, _ = SealRecord(&r) }); n > enc+1 {
			t.Errorf("SealRecord of %s: %.0f allocations, want at most %.0f (the encoder's into one buffer, and the hash)", rec.IdempotencyKey, n, enc+1)
		}
	}
}
