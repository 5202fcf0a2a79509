package consumer

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
