package schemas_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"

	. "github.com/onceflight/onceflight/schemas"
)

// repeatRecord is a record as a repeats drain finds it: a noop command's,
// succeeded at its first attempt, with the times the executor writes
// (nanoseconds, UTC), one evidence entry and 200 bytes of data.
func repeatRecord() Record {
	t0 := time.Date(2026, 12, 7, 14, 51, 4, 123456789, time.UTC)
	t1 := t0.Add(173 * time.Microsecond)
	t2 := t0.Add(401 * time.Microsecond)
	rec := Record{
		IdempotencyKey: "ofb-1765119064.-9f3a64c21be0d57e", Entity: "entity-4711", Action: "noop",
		Status: StatusSucceeded, Fingerprint: GoldenFingerprint, Attempts: 1, EntityVersion: 12,
		Result:    json.RawMessage(`{"ok":true}`),
		Command:   CommandRef{ID: "cmd-4711-12", Source: "urn:onceflight:bench", Partition: 7, Offset: 81234},
		StartedAt: &t0, FinishedAt: &t2, Executor: "onceflight-0", Epoch: 3, FencingToken: 41,
		Data:          json.RawMessage(`{"amount":1250,"currency":"EUR","note":"` + strings.Repeat("x", 150) + `"}`),
		EstablishedBy: EstablishedByAnswer,
		Hash:          "sha256:0000000000000000000000000000000000000000000000000000000000000001",
		PrevHash:      "sha256:0000000000000000000000000000000000000000000000000000000000000000",
	}
	wire.AddEvidence(&rec, Evidence{Kind: EvidenceAttempt, Attempt: 1, FencingToken: 41, At: t1, EndedAt: &t2, Answer: AnswerSucceeded})
	return rec
}

// BenchmarkUnmarshalRecordRepeat prices the decode a repeat pays for its
// key's stored record (UnmarshalRecordKeep, as LookupPrefetched calls it).
func BenchmarkUnmarshalRecordRepeat(b *testing.B) {
	rec := repeatRecord()
	raw, err := wire.SealRecord(&rec)
	if err != nil {
		b.Fatal(err)
	}
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = bytes.Clone(raw)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := UnmarshalRecordKeep(bufs[i&63]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkUnmarshalRecordIndex prices a restore's decode of the same
// record (UnmarshalRecordIndex: everything checked, the index's fields kept).
func BenchmarkUnmarshalRecordIndex(b *testing.B) {
	rec := repeatRecord()
	raw, err := wire.SealRecord(&rec)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := UnmarshalRecordIndex(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// otherForms are records this build does not write but may read: other
// versions' (fields missing, unknown fields), other time forms and
// offsets, integers at and past int64's edge, keys written otherwise
// (escaped, another case, spaces), and a few that encoding/json refuses.
var otherForms = []string{
	// An older version's: no established_by, evidence, unique_key, deadline.
	`{"action":"noop","attempts":1,"command":{"id":"c","offset":5,"partition":1,"source":"s"},"entity":"e","entity_version":2,"epoch":1,"error":null,"executor":"x","finished_at":"2026-11-30T10:00:00.5Z","fingerprint":"f","hash":"sha256:1","idempotency_key":"k","prev_hash":"","result":null,"started_at":"2026-11-30T10:00:00Z","status":"succeeded"}`,
	// A later version's: unknown members.
	`{"idempotency_key":"k","status":"succeeded","finished_at":"2026-11-30T10:00:00Z","shard":"s-1","hash":"sha256:1"}`,
	`{"idempotency_key":"k","status":"failed","evidence":[{"kind":"attempt","attempt":1,"at":"2026-11-30T10:00:00Z","answer":"rejected","why":"x"}]}`,
	// Other time forms: offsets, lower case, ten fraction digits, a comma.
	`{"status":"succeeded","finished_at":"2026-11-30T10:00:00+01:00","started_at":"2026-11-30T09:00:00-00:30"}`,
	`{"status":"succeeded","finished_at":"2026-11-30T10:00:00.000Z","started_at":"2026-11-30t09:00:00z"}`,
	`{"status":"succeeded","finished_at":"2026-11-30T10:00:00.1234567891Z","deadline":"2026-11-30T10:00:00,5Z"}`,
	`{"status":"succeeded","evidence":[{"at":"2026-11-30T10:00:00+00:00","ended_at":"2026-11-30T10:00:00.1-01:00"}]}`,
	`{"status":"succeeded","resolution":{"at":"2026-11-30T10:00:00+05:45","by":"ann","as":"succeeded","offset":3}}`,
	`{"status":"succeeded","finished_at":"\u0032026-11-30T10:00:00Z"}`,
	`{"status":"succeeded","finished_at":"2026-02-29T10:00:00Z"}`,
	`{"status":"succeeded","finished_at":"2026-11-30T24:00:00Z"}`,
	`{"status":"succeeded","finished_at":"2026-11-30 10:00:00Z"}`,
	`{"status":"succeeded","finished_at":1}`,
	// Integers.
	`{"entity_version":999999999999999999,"epoch":-999999999999999999,"attempts":-0}`,
	`{"entity_version":9223372036854775807,"epoch":-9223372036854775808,"fencing_token":1000000000000000000}`,
	`{"entity_version":9223372036854775808}`,
	`{"epoch":-9223372036854775809}`,
	`{"entity_version":01}`, `{"entity_version":-01}`, `{"entity_version":-}`, `{"entity_version":1.0}`,
	`{"entity_version":1e3}`, `{"command":{"partition":2147483648}}`, `{"command":{"partition":-2147483648}}`,
	`{"attempts":00}`, `{"attempts":-0}`, `{"attempts":+1}`, `{"attempts":null,"epoch":null}`,
	// Keys: escaped, other case, spaces, digits, empty, duplicate.
	`{"st\u0061tus":"succeeded"}`, `{"Status":"succeeded","ENTITY":"e"}`, `{ "status" : "succeeded" , "epoch" :3 }`,
	`{"status":"succeeded","x1":2}`, `{"":1,"status":"failed"}`, `{"status":"failed","status":"succeeded"}`,
	"{\"status\"\t:\n\"failed\"}", `{"status":"failed",}`, `{"status" "failed"}`, `{"status":nul}`, `{"status":"failed"} x`,
	// Nulls where objects and arrays go.
	`{"error":null,"resolution":null,"release":null,"evidence":null,"started_at":null,"result":null,"data":null}`,
	`{"error":{"code":null,"message":"m"},"command":null}`,
}

// TestUnmarshalRecordOtherForms: on records of other versions and forms,
// the keeping decoder (a repeat's) answers as encoding/json does — the
// reference the reflection-free decoder is held to.
func TestUnmarshalRecordOtherForms(t *testing.T) {
	for _, s := range otherForms {
		checkAgainstJSON(t, []byte(s))
	}
	rec := repeatRecord()
	b, err := wire.SealRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstJSON(t, b)
}

// checkAgainstJSON: UnmarshalRecordKeep and UnmarshalRecord fail where
// json.Unmarshal fails and otherwise decode its record.
func checkAgainstJSON(t *testing.T, in []byte) {
	t.Helper()
	var want Record
	werr := json.Unmarshal(in, &want)
	for name, dec := range map[string]func([]byte) (Record, error){"keep": UnmarshalRecordKeep, "copy": UnmarshalRecord} {
		got, err := dec(bytes.Clone(in))
		if (err == nil) != (werr == nil) {
			t.Fatalf("%s %s: error %v, encoding/json %v", name, in, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %s\ngot  %+v\njson %+v", name, in, got, want)
		}
	}
}

// FuzzUnmarshalRecordMatchesJSON: on arbitrary bytes the record decoders
// fail exactly where encoding/json fails and otherwise decode what it
// decodes. The decoders before round 22 were held to the same reference
// (FuzzDecodeRecordFast), so this is the old decoder against the new.
func FuzzUnmarshalRecordMatchesJSON(f *testing.F) {
	addRecordSeeds(f)
	for _, s := range otherForms {
		f.Add([]byte(s))
	}
	rec := repeatRecord()
	b, _ := wire.SealRecord(&rec)
	f.Add(b)
	f.Fuzz(checkAgainstJSON)
}

// TestRepeatRecordDecodeRoom: a repeat's record decodes into one heap
// object (its four times and its evidence entry share it), and evidence
// appended to the record afterwards (wire.AddEvidence) moves out of it
// without writing over the record's times.
func TestRepeatRecordDecodeRoom(t *testing.T) {
	rec := repeatRecord()
	b, err := wire.SealRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := UnmarshalRecordKeep(b); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("%v allocations per decode, want 1", n)
	}
	got, err := UnmarshalRecordKeep(bytes.Clone(b))
	if err != nil {
		t.Fatal(err)
	}
	want := got
	want.StartedAt, want.FinishedAt = new(*got.StartedAt), new(*got.FinishedAt)
	want.Evidence = append([]Evidence(nil), got.Evidence...)
	later := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		wire.AddEvidence(&got, Evidence{Kind: EvidenceConfirm, Attempt: 1, At: later, EndedAt: &later, Answer: AnswerFound, Detail: strings.Repeat("d", i)})
	}
	if !got.StartedAt.Equal(*want.StartedAt) || !got.FinishedAt.Equal(*want.FinishedAt) || *got.Evidence[0].EndedAt != *want.Evidence[0].EndedAt ||
		!reflect.DeepEqual(got.Evidence[0], want.Evidence[0]) || len(got.Evidence) != 4 {
		t.Fatalf("after AddEvidence: started %v finished %v evidence %+v; want %v %v %+v", got.StartedAt, got.FinishedAt, got.Evidence,
			want.StartedAt, want.FinishedAt, want.Evidence)
	}
}
