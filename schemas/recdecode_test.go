package schemas_test

import (
	"bytes"
	"encoding/json"
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
