package decide

import (
	"fmt"

	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// CodeExecutorError is the code of a command answered unresolved because
// handling it hit a bug (row executor-error).
const CodeExecutorError = "executor_error"

// StepAside leaves nothing and answers nothing: the command gave its
// place up before sending anything (effect.CodeSteppedAside), and its
// entity waits, held by its offset alone, until its system has room.
const StepAside Verdict = "step_aside"

// AnswerRows is the table of what an execution's end leaves: the
// connector's decision (or a bug while handling the command) becomes the
// command's answer, or no answer at all.
var AnswerRows = []Row{
	{"stepped-aside", "the command's external system is down and enough commands wait for it already, and nothing the command sent can have taken effect: it sent nothing, or every request was answered \"not done\" (docs/connectors.md#protecting-the-external-system)", "nothing more recorded, nothing answered: the executor keeps only the command's offset (and those of its entity's later commands), reads it again from Kafka when the system has room, and decides it then as if it were new — or, when its record says \"not done\" (`in_progress`, `connector_unavailable`), attempts it again at once (inherit-not-done); the partition's committed offset stays below it"},
	{"not-decided", "the attempt did not start, or a stop interrupted it", "nothing answered: the record stays `in_progress` with its deadline, and the command is consumed again by the partition's next owner, which inherits it"},
	{"executor-error", "handling the command panicked (a bug)", "answered `unresolved` `executor_error` (an attempt may have left); journaled only when the key has no record or one in progress, never over a final record"},
	{"decided", "none of the above", "the record gets the connector's outcome, established by the answer or the confirmation — by the reconciler when the reconciler or `onceflight reconcile` asked"},
}

// Performed decides what the connector's decision dec leaves, asker being
// who runs the execution's confirmations (schemas.By*; "" for the
// executor). For Settle, EstablishedBy overrides the decision's own
// provenance ("" keeps it).
func Performed(dec effect.Decision, asker string) Decision {
	if dec.Code == effect.CodeSteppedAside {
		return Decision{Row: "stepped-aside", Verdict: StepAside}
	}
	if dec.Code == effect.CodeNotStarted || dec.Code == effect.CodeInterrupted {
		return Decision{Row: "not-decided", Verdict: Ignore}
	}
	d := Decision{Row: "decided", Verdict: Settle}
	if asker == schemas.ByReconciler || asker == schemas.ByOperator {
		d.EstablishedBy = schemas.EstablishedByReconciler
	}
	return d
}

// Panicked decides the answer of a command whose handling panicked with
// p; rec is the key's record as the command sees it (nil: none). An
// unresolved answer, not a crash nor a partition stuck on a command that
// panics every time it is consumed: an attempt may have been sent, and an
// operator can look and resolve it.
func Panicked(rec *schemas.Record, p any) Decision {
	return Decision{Row: "executor-error", Verdict: Unresolved, Code: CodeExecutorError,
		Message: fmt.Sprintf("internal error while handling the command: %v", p),
		Journal: rec == nil || rec.Status == schemas.StatusInProgress}
}
