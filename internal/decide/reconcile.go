package decide

import (
	"encoding/json"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// Verdicts of reconcile requests (ReconcileRows), besides LookUpTarget,
// Inherit and Skip.
const (
	// CheckRate asks the executor to count the request against the
	// per-(entity, key) rate limit (the count is kept by the executor),
	// then to decide again with the answer.
	CheckRate Verdict = "check_rate"
	// Ignore does nothing and answers nothing: a reconcile request is a
	// request to look again, not a command with an answer of its own.
	Ignore Verdict = "ignore"
	// Request publishes a reconcile request for the record to its
	// entity's partition (the reconciler's own chore).
	Request Verdict = "request"
	// Confirm asks the target's connector whether its effect happened
	// and, where it says it did not, attempts it again (intent first);
	// the result settles the record (Reconciled says whether to record it).
	Confirm Verdict = "confirm"
)

// ReconcilerSource is the source of the reconciler's own reconcile
// requests; any other source is an operator's (onceflight reconcile).
const ReconcilerSource = "onceflight-reconciler"

// ReconcileInput is what a reconcile request depends on, gathered by the
// executor in the request's entity's single flight.
type ReconcileInput struct {
	Cmd schemas.Command
	// TargetKnown says Target was looked up (after LookUpTarget): the
	// record of the request's key in the request's own entity, as seen at
	// the request's position; nil if none.
	TargetKnown bool
	Target      *schemas.Record
	// RateKnown says Allowed was asked (after CheckRate): the request is
	// within the rate limit (and was counted).
	RateKnown, Allowed bool
	// ActionConfigured: the target's action is configured; CanLearn: its
	// connector confirms, or is idempotent by key (something new can be
	// learnt automatically).
	ActionConfigured, CanLearn bool
}

// ReconcileOf is what Reconcile decided, with the key the request names
// and who asks (schemas.ByReconciler or schemas.ByOperator): the
// confirmation's evidence and the record's provenance say so.
type ReconcileOf struct {
	Decision
	Key, Asker string
}

// ReconcileRows is the table of reconcile requests (the reconciler's, and
// `onceflight reconcile`), tried in order; the last two rows decide, after
// the confirmation, whether its result is recorded.
var ReconcileRows = []Row{
	{"reconcile-malformed", "the data lacks `key`", "nothing"},
	{"reconcile-target-lookup", "the named record is not known yet", "the executor looks it up in the request's own entity, as seen at the request's position, and decides again"},
	{"reconcile-no-record", "no record of the key in the entity", "nothing"},
	{"reconcile-rate-check", "the request is not counted yet", "the executor counts it against its (entity, key): at most one per half `reconcile.every`, whoever sends it; decides again"},
	{"reconcile-rate-limited", "another request for the (entity, key) was counted less than half `reconcile.every` ago, or requests for 32 768 other records were (the count's bound)", "nothing (logged at DEBUG)"},
	{"reconcile-inherit", "the record is in progress (an owner that stopped, an interrupted reconcile attempt)", "inherited like any in-progress key: wait for its deadline plus `--clock-drift`, confirm"},
	{"reconcile-not-unresolved", "the record is not `unresolved`", "nothing"},
	{"reconcile-action-gone", "the record's action is no longer configured", "nothing"},
	{"reconcile-cannot-learn", "the action's connector neither confirms nor is `idempotent_by_key`", "nothing: nothing new can be learnt automatically"},
	{"reconcile-confirm", "none of the above", "confirmed; where the connector says the effect did not happen, attempted again (intent first)"},
	{"reconcile-still-unknown", "after the confirmation: still unknown, and no new attempt was made", "nothing recorded: the record stays `unresolved`"},
	{"reconcile-settled", "after the confirmation: anything else", "the record gets the result, `established_by: reconciler`; its command gets a second outcome"},
}

// Reconcile decides what a reconcile request does.
func Reconcile(in ReconcileInput) ReconcileOf {
	cmd := in.Cmd
	var req struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(cmd.Data, &req); err != nil || req.Key == "" {
		return ReconcileOf{Decision: Decision{Row: "reconcile-malformed", Verdict: Ignore}}
	}
	out := ReconcileOf{Key: req.Key, Asker: schemas.ByOperator}
	if cmd.Source == ReconcilerSource {
		out.Asker = schemas.ByReconciler
	}
	t := in.Target
	switch {
	case !in.TargetKnown:
		out.Decision = Decision{Row: "reconcile-target-lookup", Verdict: LookUpTarget}
	case t == nil:
		out.Decision = Decision{Row: "reconcile-no-record", Verdict: Ignore}
	case !in.RateKnown:
		out.Decision = Decision{Row: "reconcile-rate-check", Verdict: CheckRate}
	case !in.Allowed:
		out.Decision = Decision{Row: "reconcile-rate-limited", Verdict: Ignore}
	case t.Status == schemas.StatusInProgress:
		out.Decision = Decision{Row: "reconcile-inherit", Verdict: Inherit}
	case t.Status != schemas.StatusUnresolved:
		out.Decision = Decision{Row: "reconcile-not-unresolved", Verdict: Ignore}
	case !in.ActionConfigured:
		out.Decision = Decision{Row: "reconcile-action-gone", Verdict: Ignore}
	case !in.CanLearn:
		out.Decision = Decision{Row: "reconcile-cannot-learn", Verdict: Ignore}
	default:
		out.Decision = Decision{Row: "reconcile-confirm", Verdict: Confirm}
	}
	return out
}

// Reconciled decides whether a reconcile confirmation's result is
// recorded: one that settles nothing is not — unless an attempt was made,
// whose intent put the key back in progress: leaving it there would hold
// the key (and its entity) forever.
func Reconciled(outcome schemas.Status, attempted bool) Decision {
	if outcome == schemas.StatusUnresolved && !attempted {
		return Decision{Row: "reconcile-still-unknown", Verdict: Ignore}
	}
	return Decision{Row: "reconcile-settled", Verdict: Settle}
}

// DueRows is the reconciler's table, tried in order for each unresolved
// or in-progress record it lists every `reconcile.every`: which of them it
// asks to be confirmed again. It does not confirm by itself: it sends a
// reconcile request to the entity's partition (ReconcileRows), so the
// confirmation runs in the entity's single flight, under the owner's fence.
var DueRows = []Row{
	{"not-owned", "the record's partition is not owned by this executor", "nothing: its owner's reconciler asks"},
	{"past-window", "the record finished more than `reconcile.for` ago", "nothing: it stays for an operator"},
	{"due-unresolved", "the record is `unresolved`", "a reconcile request"},
	{"due-stale", "the record is in progress and its deadline passed more than `--clock-drift` + `reconcile.every` + the action's `confirm_timeout` + its `lookup_lag` ago (its owner did not settle it)", "a reconcile request, which inherits it"},
	{"not-due", "none of the above", "nothing"},
}

// Due decides whether the reconciler asks for rec to be confirmed again.
// grace is the clock drift plus reconcile.every plus the action's
// confirm_timeout, window is reconcile.for.
func Due(rec schemas.Record, owned bool, now time.Time, grace, window time.Duration) Decision {
	switch {
	case !owned:
		return Decision{Row: "not-owned", Verdict: Ignore}
	case rec.FinishedAt != nil && now.Sub(*rec.FinishedAt) > window:
		return Decision{Row: "past-window", Verdict: Ignore}
	case rec.Status == schemas.StatusUnresolved:
		return Decision{Row: "due-unresolved", Verdict: Request}
	case rec.Status == schemas.StatusInProgress && rec.Deadline != nil && now.Sub(*rec.Deadline) > grace:
		return Decision{Row: "due-stale", Verdict: Request}
	}
	return Decision{Row: "not-due", Verdict: Ignore}
}
