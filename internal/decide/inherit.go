package decide

import (
	"fmt"

	"github.com/onceflight/onceflight/schemas"
)

// Verdicts of inherited executions (InheritRows), besides Inherit,
// Dispatch and Confirm.
const (
	// Unresolved answers the execution unresolved with Code: what happened
	// cannot be learnt automatically, a person decides (resolve).
	Unresolved Verdict = "unresolved"
	// Reexecute attempts an inherited execution again at once, without
	// confirming: its last attempt was answered "not done", with nothing
	// before it in doubt.
	Reexecute Verdict = "reexecute"
)

// InheritRows is the table of executions left in progress — by an owner
// that stopped, or an interrupted reconcile attempt — that the entity's
// single flight inherits: the first two rows run before each command of
// an entity whose state names an execution in progress, the last two
// decide how an inherited execution is settled (row `inherit` of Rows,
// row `reconcile-inherit` of ReconcileRows, and `in-flight-first`).
var InheritRows = []Row{
	{"in-flight-first", "the entity has another key in progress (an earlier owner's, or an interrupted reconcile attempt)", "that execution is inherited first (G1: one execution per entity at a time), then the command is decided"},
	{"in-flight-gone", "the entity's key in progress has no record in progress any more (it was settled meanwhile)", "the command is decided"},
	{"inherit-action-gone", "the inherited record's action is no longer configured", "answered `unresolved` `unknown_action`: nothing can confirm it, a person resolves it"},
	{"inherit-not-done", "the inherited record says its last attempt was answered \"not done\" (`connector_unavailable`: it took no effect, and nothing before it is in doubt)", "attempted again at once, without confirming; the inherited attempts use up none of `max_attempts`"},
	{"inherit-confirm", "none of the above", "wait for its deadline plus `--clock-drift`, confirm; attempted again only where the connector says the effect did not happen"},
}

// InFlight decides, before a command of an entity whose state names
// another key in progress, whether that execution is inherited first.
// rec is that key's record as the command sees it (nil: none).
func InFlight(rec *schemas.Record) Decision {
	if rec == nil || rec.Status != schemas.StatusInProgress || rec.Entity == "" {
		return Decision{Row: "in-flight-gone", Verdict: Dispatch}
	}
	return Decision{Row: "in-flight-first", Verdict: Inherit}
}

// Inheriting decides how an inherited in-progress record is settled.
func Inheriting(rec schemas.Record, actionConfigured bool) Decision {
	switch {
	case !actionConfigured:
		return Decision{Row: "inherit-action-gone", Verdict: Unresolved, Code: schemas.CodeUnknownAction,
			Message: fmt.Sprintf("inherited in_progress execution of action %q, which is no longer configured", rec.Action)}
	case lastNotDone(rec):
		return Decision{Row: "inherit-not-done", Verdict: Reexecute}
	}
	return Decision{Row: "inherit-confirm", Verdict: Confirm}
}

// lastNotDone reports whether an inherited in_progress record says its
// last attempt was answered "not done" (the executor's not-done intent,
// code connector_unavailable).
func lastNotDone(rec schemas.Record) bool {
	return rec.Status == schemas.StatusInProgress && rec.Error != nil && rec.Error.Code == schemas.CodeConnectorUnavailable
}
