package wire

import (
	"fmt"
	"strings"

	"github.com/onceflight/onceflight/schemas"
)

// The human reading of a record's evidence is defined next to the record
// so that every reader of the journal (explain, the console, the executor's
// own tests) words it the same way from the wire record alone.

// EvidenceText tells how r's status came about from its evidence
// (docs/events.md#evidence), as one line: "attempt 1 → ambiguous (after
// 2s: timeout) → confirm asked by executor → found → succeeded,
// established by confirmation". A record written before evidence existed
// gives "".
func EvidenceText(r *schemas.Record) string {
	if len(r.Evidence) == 0 && r.EstablishedBy == "" {
		return ""
	}
	var parts []string
	if r.EvidenceDropped > 0 {
		parts = append(parts, fmt.Sprintf("(%d earlier step(s) left out)", r.EvidenceDropped))
	}
	for _, ev := range r.Evidence {
		parts = append(parts, EntryText(ev))
	}
	if r.Resolution != nil && r.Resolution.As != "approved" && r.EstablishedBy == schemas.EstablishedByOperator {
		parts = append(parts, fmt.Sprintf("resolved by %s: %q", r.Resolution.By, r.Resolution.Reason))
	}
	switch {
	case r.Status == schemas.StatusInProgress:
		if n := len(r.Evidence); n > 0 && r.Evidence[n-1].Kind == schemas.EvidenceAttempt && r.Evidence[n-1].Answer == schemas.AnswerAmbiguous {
			parts = append(parts, "confirmation pending")
		} else {
			parts = append(parts, fmt.Sprintf("attempt %d in progress", r.Attempts))
		}
	case r.EstablishedBy != "":
		parts = append(parts, fmt.Sprintf("%s, established by %s", r.Status, r.EstablishedBy))
	default:
		parts = append(parts, string(r.Status))
	}
	return strings.Join(parts, " → ")
}

// EntryText is one evidence entry in EvidenceText's words: "attempt 2 →
// unavailable (HTTP 503)", "confirm asked by executor → not found".
func EntryText(ev schemas.Evidence) string {
	var s string
	switch ev.Kind {
	case schemas.EvidenceConfirm:
		s = fmt.Sprintf("confirm asked by %s → %s", ev.By, strings.ReplaceAll(ev.Answer, "_", " "))
	default:
		s = fmt.Sprintf("attempt %d → %s", ev.Attempt, ev.Answer)
	}
	if ev.Detail != "" {
		s += " (" + ev.Detail + ")"
	}
	return s
}
