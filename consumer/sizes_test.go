package consumer

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// A final record that would not fit max.message.bytes loses the command
// data first (the command keeps it), then its result (a marker says how
// big it was), and keeps its status: the effect happened.
func TestFitShrinksFinalRecords(t *testing.T) {
	e := &Executor{cfg: Config{MaxMessageBytes: 64 << 10}, m: newMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler)}
	big := json.RawMessage(`"` + strings.Repeat("x", 56<<10) + `"`)

	rec := schemas.Record{IdempotencyKey: "k", Status: schemas.StatusSucceeded, Data: big, Result: json.RawMessage(`{"ok":true}`)}
	if !e.fit(&rec) || rec.Data != nil || string(rec.Result) != `{"ok":true}` || rec.Status != schemas.StatusSucceeded {
		t.Fatalf("data not dropped first: data %d bytes, result %s", len(rec.Data), rec.Result)
	}

	rec = schemas.Record{IdempotencyKey: "k", Status: schemas.StatusSucceeded, Data: big, Result: big}
	e.fit(&rec)
	var marker struct {
		Truncated bool `json:"truncated"`
		Bytes     int  `json:"bytes"`
	}
	if err := json.Unmarshal(rec.Result, &marker); err != nil || !marker.Truncated || marker.Bytes != len(big) || !e.fits(&rec) {
		t.Fatalf("result not replaced by a marker: %s (fits %v)", rec.Result, e.fits(&rec))
	}

	// An in_progress record keeps its data: a new owner re-executes from it.
	small := json.RawMessage(`"` + strings.Repeat("x", 8<<10) + `"`)
	in := schemas.Record{IdempotencyKey: "k", Status: schemas.StatusInProgress, Data: small}
	if e.fit(&in) || len(in.Data) != len(small) {
		t.Fatal("a fitting intent was changed")
	}
}

// TestFitCountsEvidence: the evidence the external system's answers wrote
// counts toward the record's size, and is shrunk last when nothing else is
// left to shrink: a record with 16 long details and a limit just above the
// overhead comes out fitting.
func TestFitCountsEvidence(t *testing.T) {
	e := &Executor{cfg: Config{MaxMessageBytes: recordOverhead + 8<<10}, m: newMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler)}
	rec := schemas.Record{IdempotencyKey: "k", Entity: "e", Status: schemas.StatusSucceeded}
	for i := range wire.MaxEvidence {
		rec.Evidence = append(rec.Evidence, schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: i + 1, Answer: "ambiguous",
			Detail: strings.Repeat("\x01", 200)}) // escapes to \u0001: 6 bytes each
	}
	if e.fits(&rec) {
		t.Fatal("a record with 16 × 200 escaped bytes of evidence is taken to fit in 8 KiB beyond the overhead")
	}
	if !e.fit(&rec) {
		t.Fatal("fit did not shrink it")
	}
	b, err := wire.MarshalRecord(rec)
	if err != nil || len(b)+recordOverhead > e.cfg.MaxMessageBytes {
		t.Fatalf("after fit: %d bytes (%v), limit %d", len(b), err, e.cfg.MaxMessageBytes-recordOverhead)
	}
	if len(rec.Evidence) != wire.MaxEvidence || rec.Evidence[0].Answer != "ambiguous" {
		t.Errorf("fit dropped the evidence's classes: %+v", rec.Evidence[0])
	}
}
