package decide

import (
	"strings"
	"testing"

	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// TestAnswerRows: every row of the table of what an execution's end
// leaves.
func TestAnswerRows(t *testing.T) {
	hit := map[string]bool{}
	for _, tc := range []struct {
		name  string
		dec   effect.Decision
		asker string
		row   string
		verd  Verdict
		by    string
	}{
		{"stepped aside", effect.Decision{Outcome: schemas.StatusUnresolved, Code: effect.CodeSteppedAside}, "", "stepped-aside", StepAside, ""},
		{"not started", effect.Decision{Code: effect.CodeNotStarted}, "", "not-decided", Ignore, ""},
		{"interrupted by a stop", effect.Decision{Code: effect.CodeInterrupted}, schemas.ByReconciler, "not-decided", Ignore, ""},
		{"succeeded", effect.Decision{Outcome: schemas.StatusSucceeded}, "", "decided", Settle, ""},
		{"failed, executor asked", effect.Decision{Outcome: schemas.StatusFailed, Code: "http_400"}, schemas.ByExecutor, "decided", Settle, ""},
		{"confirmed for the reconciler", effect.Decision{Outcome: schemas.StatusSucceeded, EstablishedBy: schemas.EstablishedByConfirmation}, schemas.ByReconciler, "decided", Settle, schemas.EstablishedByReconciler},
		{"confirmed for an operator's request", effect.Decision{Outcome: schemas.StatusFailed}, schemas.ByOperator, "decided", Settle, schemas.EstablishedByReconciler},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Performed(tc.dec, tc.asker)
			wantRow(t, d, tc.row, tc.verd, "")
			if d.EstablishedBy != tc.by {
				t.Fatalf("established by %q, want %q", d.EstablishedBy, tc.by)
			}
			hit[d.Row] = true
		})
	}
	for _, tc := range []struct {
		name    string
		rec     *schemas.Record
		journal bool
	}{
		{"no record", nil, true},
		{"in progress", &schemas.Record{Status: schemas.StatusInProgress}, true},
		{"succeeded", &schemas.Record{Status: schemas.StatusSucceeded}, false},
		{"unresolved", &schemas.Record{Status: schemas.StatusUnresolved}, false},
	} {
		t.Run("panic, "+tc.name, func(t *testing.T) {
			d := Panicked(tc.rec, "index out of range")
			wantRow(t, d, "executor-error", Unresolved, CodeExecutorError)
			if d.Journal != tc.journal || !strings.Contains(d.Message, "index out of range") {
				t.Fatalf("journal %v (want %v), message %q", d.Journal, tc.journal, d.Message)
			}
			hit[d.Row] = true
		})
	}
	covered(t, AnswerRows, hit)
}
