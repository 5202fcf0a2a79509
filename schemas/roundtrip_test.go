package schemas_test

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/jcs"
	"github.com/onceflight/onceflight/internal/wire"
	. "github.com/onceflight/onceflight/schemas"
)

func TestEncodeDecodeCommandRoundTrip(t *testing.T) {
	dl := time.Date(2025, 3, 1, 12, 5, 0, 123000000, time.UTC)
	small, big := int64(3), int64(9_000_000_000)
	cmds := map[string]Command{
		"minimal": {ID: "c1", Source: "s", Type: "t", Subject: "e1"},
		"full": {ID: "c2", Source: "urn:x", Type: "payments.refund", Subject: "order-1", IdempotencyKey: "k",
			ExpectedVersion: &small, Deadline: &dl, TraceParent: ValidTP, Data: json.RawMessage(`{"b":[1,2.50],"a":"é\n"}`)},
		"big version": {ID: "c3", Source: "s", Type: "t", Subject: "e", ExpectedVersion: &big, Data: json.RawMessage(`{}`)},
	}
	for name, c := range cmds {
		for _, mode := range []Mode{Binary, Structured} {
			t.Run(name+"/"+mode.String(), func(t *testing.T) {
				r, err := EncodeCommand(c, mode)
				if err != nil {
					t.Fatal(err)
				}
				if string(r.Key) != c.Subject || r.Topic != "" {
					t.Fatalf("key %q topic %q", r.Key, r.Topic)
				}
				got, err := DecodeCommand(r, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := c
				if want.IdempotencyKey == "" {
					want.IdempotencyKey = c.Source + "/" + c.ID
				}
				fp, err := Fingerprint(c.Type, c.Subject, c.Data)
				if err != nil {
					t.Fatal(err)
				}
				want.Fingerprint = fp
				// Data may be re-encoded (compacted) by sdk-go; compare canonically.
				if cg, cw := canon(t, got.Data), canon(t, want.Data); cg != cw {
					t.Fatalf("data %s, want %s", cg, cw)
				}
				got.Data, want.Data = nil, nil
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("got  %+v\nwant %+v", got, want)
				}
			})
		}
	}
}

func canon(t *testing.T, b []byte) string {
	if len(b) == 0 {
		return ""
	}
	c, err := jcs.CanonicalV1(b, true)
	if err != nil {
		t.Fatal(err)
	}
	return string(c)
}

func testRecord() Record {
	started := time.Date(2025, 3, 1, 12, 0, 1, 0, time.UTC)
	finished := time.Date(2025, 3, 1, 12, 0, 2, 0, time.UTC)
	return Record{
		IdempotencyKey: "refund-1042", Entity: "order-1042", Action: "payments.refund",
		Status: StatusSucceeded, Fingerprint: GoldenFingerprint, Attempts: 1, EntityVersion: 3,
		Result:    json.RawMessage(`{"http_status":201,"body":{"refund_id":"re_77"}}`),
		Command:   CommandRef{ID: "cmd-7f3a", Source: "urn:shop:refunds-ui", Partition: 2, Offset: 1234},
		StartedAt: &started, FinishedAt: &finished, Executor: "onceflight-0", Epoch: 17,
		TraceParent: ValidTP, Data: json.RawMessage(`{"amount":{"value":1999,"currency":"EUR"},"reason":"damaged"}`),
		Hash:     "sha256:0000000000000000000000000000000000000000000000000000000000000001",
		PrevHash: "sha256:0000000000000000000000000000000000000000000000000000000000000000",
	}
}

func TestEncodeDecodeOutcomeRoundTrip(t *testing.T) {
	for _, replayed := range []bool{false, true} {
		rec := testRecord()
		r, err := wire.EncodeOutcome(rec, "cmd-7f3a", replayed)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != rec.Entity || !strings.HasPrefix(string(r.Headers[0].Value), "application/cloudevents+json") {
			t.Fatalf("record %+v", r)
		}
		// replayed must be a JSON boolean, not a string.
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(r.Value, &raw); err != nil {
			t.Fatal(err)
		}
		if s := string(raw["replayed"]); s != "true" && s != "false" {
			t.Fatalf("replayed is %s", s)
		}
		if raw["data"][0] != '{' {
			t.Fatalf("data not inline: %s", raw["data"])
		}
		o, err := DecodeOutcome(r)
		if err != nil {
			t.Fatal(err)
		}
		want := Outcome{ID: OutcomeID(rec.IdempotencyKey, rec.Status, "cmd-7f3a"), Type: "onceflight.execution.succeeded",
			Source: "onceflight", Subject: "order-1042", IdempotencyKey: "refund-1042", CausationID: "cmd-7f3a", Replayed: replayed}
		gotRec := o.Record
		o.Record = Record{}
		if !reflect.DeepEqual(o, want) {
			t.Fatalf("got %+v\nwant %+v", o, want)
		}
		a, _ := wire.MarshalRecord(gotRec)
		b, _ := wire.MarshalRecord(rec)
		if canon(t, a) != canon(t, b) {
			t.Fatalf("record\n%s\n%s", a, b)
		}
	}
}

func TestDecodeOutcomeBinary(t *testing.T) {
	data, _ := wire.MarshalRecord(testRecord())
	r := BinaryRecord("order-1042", string(data),
		"ce_specversion", "1.0", "ce_id", "x", "ce_source", "onceflight", "ce_type", "onceflight.execution.succeeded",
		"ce_subject", "order-1042", "ce_replayed", "true", "ce_causationid", "c", "ce_idempotencykey", "k", "content-type", "application/json")
	o, err := DecodeOutcome(r)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Replayed || o.CausationID != "c" || o.IdempotencyKey != "k" || o.Record.Entity != "order-1042" {
		t.Fatalf("%+v", o)
	}
}

func TestDecodeOutcomeRejects(t *testing.T) {
	if _, err := DecodeOutcome(LoadStructured(t)); err == nil {
		t.Fatal("a command decoded as an outcome")
	}
	if _, err := DecodeOutcome(&kgo.Record{Value: []byte("x")}); err == nil {
		t.Fatal("junk decoded as an outcome")
	}
}

func TestGoldenOutcome(t *testing.T) {
	b, err := os.ReadFile("testdata/outcome.json")
	if err != nil {
		t.Fatal(err)
	}
	o, err := DecodeOutcome(&kgo.Record{Key: []byte("order-1042"), Value: b, Headers: StructuredHeaders()})
	if err != nil {
		t.Fatal(err)
	}
	rec := testRecord()
	rec.Deadline = ptr(time.Date(2025, 3, 1, 12, 5, 0, 0, time.UTC))
	a, _ := wire.MarshalRecord(o.Record)
	w, _ := wire.MarshalRecord(rec)
	if canon(t, a) != canon(t, w) {
		t.Fatalf("record\n%s\nwant\n%s", canon(t, a), canon(t, w))
	}
	if o.ID != OutcomeID(rec.IdempotencyKey, rec.Status, o.CausationID) || o.Replayed || o.Type != "onceflight.execution.succeeded" {
		t.Fatalf("%+v", o)
	}
	// EncodeOutcome produces the same event (modulo formatting).
	r, err := wire.EncodeOutcome(rec, "cmd-7f3a", false)
	if err != nil {
		t.Fatal(err)
	}
	if canon(t, r.Value) != canon(t, b) {
		t.Fatalf("encoded\n%s\ngolden\n%s", canon(t, r.Value), canon(t, b))
	}
}

func ptr[T any](v T) *T { return &v }

func TestOutcomeID(t *testing.T) {
	id := OutcomeID("refund-1042", StatusSucceeded, "cmd-7f3a")
	if id != "cd16479c-98bb-84d9-bd43-5adb0bd86df2" {
		t.Fatalf("OutcomeID changed: %s", id)
	}
	if id != OutcomeID("refund-1042", StatusSucceeded, "cmd-7f3a") {
		t.Fatal("not deterministic")
	}
	for _, other := range []string{
		OutcomeID("refund-1042", StatusFailed, "cmd-7f3a"),
		OutcomeID("refund-1042", StatusSucceeded, "cmd-7f3b"),
		OutcomeID("refund-104", StatusSucceeded, "2cmd-7f3a"),
	} {
		if other == id {
			t.Fatal("collision")
		}
	}
}

// hashRecord is the hash rec has in its partition's chain after a record
// whose hash is prevHash: what wire.SealRecord stores in rec.Hash.
func hashRecord(prevHash string, rec Record) (string, error) {
	rec.PrevHash = prevHash
	_, err := wire.SealRecord(&rec)
	return rec.Hash, err
}

func TestHashRecord(t *testing.T) {
	rec := testRecord()
	h1, err := hashRecord("sha256:prev", rec)
	if err != nil {
		t.Fatal(err)
	}
	// Hash and PrevHash fields do not matter; the prevHash argument does.
	rec2 := rec
	rec2.Hash, rec2.PrevHash = "x", "y"
	if h, _ := hashRecord("sha256:prev", rec2); h != h1 {
		t.Fatal("hash depends on Hash/PrevHash fields")
	}
	if h, _ := hashRecord("sha256:other", rec); h == h1 {
		t.Fatal("hash ignores prevHash")
	}
	rec2 = rec
	rec2.Attempts++
	if h, _ := hashRecord("sha256:prev", rec2); h == h1 {
		t.Fatal("hash ignores content")
	}
	// A journal round trip (reformatted JSON) keeps the hash.
	b, _ := wire.MarshalRecord(rec)
	back, err := UnmarshalRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	back.Result = json.RawMessage(`{ "body": {"refund_id":"re_77"}, "http_status": 201 }`)
	if h, _ := hashRecord("sha256:prev", back); h != h1 {
		t.Fatal("hash changed across a round trip")
	}
	// A connector result with a duplicate key still hashes.
	rec2 = rec
	rec2.Result = json.RawMessage(`{"a":1,"a":2}`)
	if _, err := hashRecord("", rec2); err != nil {
		t.Fatal(err)
	}
	if _, err := UnmarshalRecord([]byte("{")); err == nil {
		t.Fatal("bad JSON accepted")
	}
}

// evidenceRecord is a record settled by a confirmation after a timeout,
// with the evidence that says so.
func evidenceRecord() Record {
	rec := testRecord()
	rec.EstablishedBy = EstablishedByConfirmation
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	t1 := t0.Add(2 * time.Second)
	wire.AddEvidence(&rec, Evidence{Kind: EvidenceAttempt, Attempt: 1, FencingToken: 7, At: t0, EndedAt: &t1, Answer: AnswerAmbiguous, Detail: "timeout: context deadline exceeded \u00e9<>&"})
	wire.AddEvidence(&rec, Evidence{Kind: EvidenceConfirm, Attempt: 1, At: t1, EndedAt: &t1, Answer: AnswerFound, By: ByExecutor})
	rec.EvidenceDropped = 2
	return rec
}
