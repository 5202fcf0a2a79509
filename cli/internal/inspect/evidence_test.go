package inspect

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// TestGoldenJournalExplains: records written before evidence existed (the
// golden journal) still decode and explain as before — no evidence line, no
// "established by".
func TestGoldenJournalExplains(t *testing.T) {
	raw, err := os.ReadFile("../../../schemas/testdata/golden/journal_records.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var prev *schemas.Record
	for i, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		rec, err := schemas.UnmarshalRecord(line)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if rec.EstablishedBy != "" || len(rec.Evidence) != 0 {
			t.Fatalf("line %d: a record from before has evidence: %+v", i, rec)
		}
		st := JournalStep(prev, rec, 0, int64(i), time.Time{})
		if strings.Contains(st.Summary, "established by") || wire.EvidenceText(&rec) != "" {
			t.Errorf("line %d: %q / %q", i, st.Summary, wire.EvidenceText(&rec))
		}
		prev = &rec
	}
}
