package effect_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// scripted answers Execute with first, then Succeeded; Confirm (when
// confirmable) says Succeeded with a result of its own.
type scripted struct {
	first       connectors.Kind
	calls       int
	confirmable bool
}

func (s *scripted) Execute(context.Context, connectors.Request) connectors.Result {
	s.calls++
	if s.calls == 1 {
		return connectors.Result{Kind: s.first, Message: "first"}
	}
	return connectors.Result{Kind: connectors.Succeeded, Result: json.RawMessage(`"executed"`)}
}

func (s *scripted) Confirm(context.Context, connectors.Request) connectors.Result {
	return connectors.Result{Kind: connectors.Succeeded, Result: json.RawMessage(`"confirmed"`)}
}

func (s *scripted) CanConfirm() bool { return s.confirmable }

// TestNextStepIsPerformsRule: for every answer kind and capability,
// Perform does what NextStep says it does, so a description built on
// NextStep (`onceflight actions`) cannot drift from the executor.
func TestNextStepIsPerformsRule(t *testing.T) {
	kinds := []connectors.Kind{connectors.Succeeded, connectors.Rejected, connectors.Unavailable, connectors.Ambiguous, connectors.NotFound}
	for _, k := range kinds {
		for _, confirm := range []bool{false, true} {
			for _, idem := range []bool{false, true} {
				conn := &scripted{first: k, confirmable: confirm}
				p := fastPolicy()
				p.IdempotentByKey = idem
				d := effect.Perform(context.Background(), conn, req("k"), p)
				step := effect.NextStep(k, confirm, idem, false)
				var ok bool
				switch step {
				case effect.StepSucceed:
					ok = d.Outcome == schemas.StatusSucceeded && conn.calls == 1
				case effect.StepFail:
					ok = d.Outcome == schemas.StatusFailed && d.Code == schemas.CodeConnectorRejected && conn.calls == 1
				case effect.StepRetry, effect.StepReexecute:
					ok = d.Outcome == schemas.StatusSucceeded && string(d.Result) == `"executed"` && conn.calls == 2
				case effect.StepConfirm:
					ok = d.Outcome == schemas.StatusSucceeded && string(d.Result) == `"confirmed"` && conn.calls == 1
				case effect.StepUnresolved:
					ok = d.Outcome == schemas.StatusUnresolved && d.Code == schemas.CodeAmbiguous && conn.calls == 1
				}
				if !ok {
					t.Errorf("%s confirm=%v idempotent=%v: NextStep says %s, Perform gave %+v after %d executions", k, confirm, idem, step, d, conn.calls)
				}
			}
		}
	}
	if s := effect.NextStep(connectors.Rejected, true, true, true); s != effect.StepUnresolved {
		t.Errorf("rejected after a possible effect: %s, want unresolved", s)
	}
}
