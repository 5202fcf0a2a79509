package wire

import (
	"bytes"
	"os"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// goldenJournal is the records of schemas' golden journal files (pinned
// there, byte for byte, as what SealRecord writes): records of the usual
// shapes, one with evidence.
func goldenJournal(t *testing.T) []schemas.Record {
	t.Helper()
	var recs []schemas.Record
	for _, name := range []string{"journal_records.jsonl", "journal_record_evidence.json"} {
		b, err := os.ReadFile("../../schemas/testdata/golden/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			rec, err := schemas.UnmarshalRecord(line)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			recs = append(recs, rec)
		}
	}
	if len(recs) < 3 {
		t.Fatalf("golden journal: %d records", len(recs))
	}
	return recs
}

// TestSealRecordAllocs: sealing allocates the sealed bytes once and the
// hash string beside what the encoder needs, nothing more (no growth of the buffer, no second copy),
// for records of the usual shapes: the executor seals one per answer.
func TestSealRecordAllocs(t *testing.T) {
	for _, rec := range goldenJournal(t) {
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
