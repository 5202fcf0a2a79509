package wire

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/onceflight/onceflight/schemas"
)

// TestEvidenceBounded: a record keeps the latest MaxEvidence entries and
// counts the rest; a detail is cut to MaxEvidenceDetail bytes on a rune
// boundary, so a record stays small whatever a connector said.
func TestEvidenceBounded(t *testing.T) {
	var rec schemas.Record
	for i := 1; i <= MaxEvidence+5; i++ {
		AddEvidence(&rec, schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: i, Answer: schemas.AnswerUnavailable, Detail: strings.Repeat("é", 300)})
	}
	if len(rec.Evidence) != MaxEvidence || rec.EvidenceDropped != 5 || rec.Evidence[0].Attempt != 6 || rec.Evidence[MaxEvidence-1].Attempt != MaxEvidence+5 {
		t.Fatalf("kept %d (first attempt %d), dropped %d", len(rec.Evidence), rec.Evidence[0].Attempt, rec.EvidenceDropped)
	}
	for _, ev := range rec.Evidence {
		if len(ev.Detail) > MaxEvidenceDetail || !utf8.ValidString(ev.Detail) || !strings.HasSuffix(ev.Detail, "…") {
			t.Fatalf("detail %d bytes, valid %v: %q", len(ev.Detail), utf8.ValidString(ev.Detail), ev.Detail)
		}
	}
	if TruncateDetail("HTTP 504") != "HTTP 504" {
		t.Error("a short detail was changed")
	}
}
