package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/onceflight/onceflight/internal/jcs"
	"github.com/onceflight/onceflight/schemas"
)

// FuzzSealRecordHash: for any record the journal's decoder accepts,
// SealRecord writes what record.go promises — bytes already in their RFC
// 8785 canonical form, whose hash as any auditor computes it (RecordHash)
// is the one SealRecord stored in the record. The hand-written encoder
// and the canonicalizer are two implementations of one form: an escape,
// a number or a member order where they differ makes every executor's
// record fail the audit's hash check.
func FuzzSealRecordHash(f *testing.F) {
	golden, err := filepath.Glob("../../schemas/testdata/golden/journal_record*.json*")
	if err != nil || len(golden) == 0 {
		f.Fatalf("golden journal files: %v %v", golden, err)
	}
	for _, name := range golden {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for line := range bytes.SplitSeq(bytes.TrimSpace(b), []byte("\n")) {
			f.Add(line)
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"idempotency_key":"k\u2028\"","data":{"b":1e21,"a":[0.1,-0,"\u00e9\ud83d\ude00"],"b":null},"result":"x","deadline":"2026-01-02T03:04:05.123456789+01:00","attempts":3}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		rec, err := schemas.UnmarshalRecord(raw)
		if err != nil {
			return
		}
		sealed, err := SealRecord(&rec)
		if err != nil {
			return // a record SealRecord refuses is never written
		}
		canon, err := jcs.AppendCanonical(nil, sealed, jcs.Mode{JCS: true})
		if err != nil || !bytes.Equal(canon, sealed) {
			t.Fatalf("sealed bytes are not canonical (%v):\n%s\ncanonical:\n%s", err, sealed, canon)
		}
		h, err := RecordHash(sealed)
		if err != nil || h != rec.Hash {
			t.Fatalf("RecordHash = %q, %v; SealRecord stored %q, for\n%s", h, err, rec.Hash, sealed)
		}
	})
}
