package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// noopRecord is a record of the shape the executor seals for each new key
// of the benchmark's noop drain (onceflight-bench: 200 bytes of data, one
// attempt's evidence, times taken from the clock, so with nanoseconds).
func noopRecord() schemas.Record {
	t0 := time.Date(2026, 12, 6, 7, 51, 53, 123456789, time.UTC)
	t1, t2 := t0.Add(1234*time.Nanosecond), t0.Add(56789*time.Nanosecond)
	rec := schemas.Record{
		Action:         "bench.noop",
		Attempts:       1,
		Command:        schemas.CommandRef{ID: "n-104211", Source: "onceflight-bench", Partition: 7, Offset: 8687},
		Data:           json.RawMessage(`{"n":104211,"pad":"` + strings.Repeat("x", 180) + `"}`),
		Entity:         "e-4211",
		EntityVersion:  11,
		Epoch:          3,
		Executor:       "onceflight-7d4b9c-1",
		Fingerprint:    "v1:3f8a2c9e0d1b4a5f6e7d8c9b0a1f2e3d4c5b6a798877665544332211ffeeddcc",
		FinishedAt:     &t2,
		IdempotencyKey: "k-104211",
		PrevHash:       "sha256:9b71d224bd62f3785d96d46ad3ea3d73319bfbc2890caadae2dff72519673ca7",
		Result:         json.RawMessage(`{"noop":true}`),
		StartedAt:      &t0,
		Status:         schemas.StatusSucceeded,
	}
	AddEvidence(&rec, schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: 1, At: t0, EndedAt: &t1, Answer: schemas.AnswerSucceeded})
	return rec
}

// BenchmarkSealRecord prices what the committer does per new key under
// its lock: encode the record and hash it (committer.chain).
func BenchmarkSealRecord(b *testing.B) {
	rec := noopRecord()
	b.ReportAllocs()
	for b.Loop() {
		r := rec
		if _, err := SealRecord(&r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeOutcomeData prices a new key's outcome event around its
// sealed bytes (outbox.OutcomeBytes).
func BenchmarkEncodeOutcomeData(b *testing.B) {
	rec := noopRecord()
	raw, err := SealRecord(&rec)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		EncodeOutcomeData(&rec, raw, rec.Command.ID, false)
	}
}

// BenchmarkSealOutcome prices a new key's record and outcome event sealed
// into one buffer (committer.chainOutcome), against SealRecord then
// EncodeOutcomeData (the committer before round 12).
func BenchmarkSealOutcome(b *testing.B) {
	rec := noopRecord()
	b.Run("one", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := rec
			ev, _, err := SealOutcome(OutcomeHead(&r, r.Command.ID, false), &r)
			if err != nil {
				b.Fatal(err)
			}
			OutcomeRecord(&r, ev)
		}
	})
	b.Run("apart", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := rec
			raw, err := SealRecord(&r)
			if err != nil {
				b.Fatal(err)
			}
			EncodeOutcomeData(&r, raw, r.Command.ID, false)
		}
	})
}
