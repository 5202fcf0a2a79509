package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// Verdicts of operator decisions (DecisionRows), besides Reject.
const (
	// LookUpTarget asks the executor for the record the decision names
	// (in the decision's own entity, seen at the decision's position),
	// then to decide again with it.
	LookUpTarget Verdict = "look_up_target"
	// Resolve settles the target with the status decided.
	Resolve Verdict = "resolve"
	// Approve executes the held target once.
	Approve Verdict = "approve"
	// Release frees the target's key for the commands after the release.
	Release Verdict = "release"
	// Applied answers an approval that already took effect (settling the
	// execution it started, if that is still in progress).
	Applied Verdict = "applied"
)

// NoKeyHint is how an operator gets out of "no control key": one line.
const NoKeyHint = "create a key with `onceflight keygen --out FILE` and give it to serve and the CLI with --control-key-file FILE (or ONCEFLIGHT_CONTROL_KEY_FILE)"

// DecisionInput is what an operator decision (resolve, approve, release)
// depends on, gathered by the executor.
type DecisionInput struct {
	Cmd schemas.Command
	// SignatureErr is what verifying the decision's signature said (nil:
	// valid, signed with a key the executor has).
	SignatureErr error
	// TargetKnown says Target was looked up (after LookUpTarget): the
	// record the decision names, nil if none.
	TargetKnown bool
	Target      *schemas.Record
	// ActionConfigured, for approve: the target's action is configured.
	ActionConfigured bool
	// Now is the time of the decision, against the decision's not_after.
	// A zero Now checks no not_after (as a zero Input.Now checks no
	// deadline): the executor must set it.
	Now time.Time
}

// DecisionOf is what DecideOperator decided, with the decision's data.
type DecisionOf struct {
	Decision
	Req schemas.Decision
}

// DecisionRows is the table of operator decisions, tried in order.
var DecisionRows = []Row{
	{"refused", "the signature does not verify (unsigned, unknown key, wrong signature, no key configured)", "rejected `not_allowed`"},
	{"malformed", "the data lacks `key` or `reason`, its `not_after` is not an RFC 3339 time, or `resolve`'s `as` is not `succeeded`, `failed` or `rejected`", "rejected `invalid_command`"},
	{"target-lookup", "the named record is not known yet", "the executor looks it up in the decision's own entity, as seen at the decision's position, and decides again"},
	{"applied", "an `approve` whose execution already started (the record carries its id)", "answered as applied; an execution still in progress is settled (`inherit`), not started again"},
	{"expired", "the decision's `not_after` has passed (a decision without `not_after`, from an earlier build, does not expire)", "rejected `expired`; the message names the `not_after`"},
	{"not-applicable", "no record of the key in the entity, or one not in a status the decision applies to (`resolve`: unresolved, held; `approve`: held; `release`: succeeded, failed, rejected)", "rejected `not_unresolved`"},
	{"action-gone", "an `approve` of a held record whose action is no longer configured", "rejected `unknown_action`"},
	{"resolve", "a `resolve`", "the record gets the status decided and its `resolution`; its command gets a second outcome"},
	{"approve", "an `approve`", "the held command is executed once; its command gets a second outcome"},
	{"release", "a `release`", "the record stays, marked released at the release's position; later commands with the key are new work"},
}

// Operator decides what an operator decision does.
func Operator(in DecisionInput) DecisionOf {
	cmd := in.Cmd
	if err := in.SignatureErr; err != nil {
		msg := fmt.Sprintf("%s refused: %v", cmd.Type, err)
		if errors.Is(err, schemas.ErrNoControlKeys) {
			msg = fmt.Sprintf("%s refused: the executor has no control key, so it accepts no operator decision; %s", cmd.Type, NoKeyHint)
		}
		return DecisionOf{Decision: reject("refused", schemas.CodeNotAllowed, msg)}
	}
	var req schemas.Decision
	if err := json.Unmarshal(cmd.Data, &req); err != nil || req.Key == "" || req.Reason == "" {
		return DecisionOf{Decision: reject("malformed", schemas.CodeInvalidCommand, cmd.Type+" needs data {\"key\",\"reason\",\"by\"} (resolve also \"as\"; \"not_after\", if any, an RFC 3339 time)")}
	}
	out := DecisionOf{Req: req}
	as := schemas.Status(req.As)
	if cmd.Type == schemas.TypeResolve && as != schemas.StatusSucceeded && as != schemas.StatusFailed && as != schemas.StatusRejected {
		out.Decision = reject("malformed", schemas.CodeInvalidCommand, fmt.Sprintf("resolve: --as %q, want succeeded, failed or rejected", req.As))
		return out
	}
	if !in.TargetKnown {
		out.Decision = Decision{Row: "target-lookup", Verdict: LookUpTarget}
		return out
	}
	t := in.Target
	if cmd.Type == schemas.TypeApprove && t != nil && t.Resolution != nil && t.Resolution.DecisionID == cmd.ID {
		out.Decision = Decision{Row: "applied", Verdict: Applied}
		return out
	}
	// After applied: an approval consumed again after its not_after (an
	// executor down that long while the approved command ran) took effect
	// before it expired, and is answered so, its execution settled.
	if !req.NotAfter.IsZero() && in.Now.After(req.NotAfter) {
		out.Decision = reject("expired", schemas.CodeExpired, fmt.Sprintf("%s of key %q refused: its not_after %s has passed (now %s); a decision is valid only until its not_after, so that a copy cannot be replayed later: decide again",
			cmd.Type, req.Key, req.NotAfter.UTC().Format(time.RFC3339), in.Now.UTC().Format(time.RFC3339)))
		return out
	}
	verb, want := "released", []schemas.Status{schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected}
	switch cmd.Type {
	case schemas.TypeResolve:
		verb, want = "resolved", []schemas.Status{schemas.StatusUnresolved, schemas.StatusHeld}
	case schemas.TypeApprove:
		verb, want = "approved", []schemas.Status{schemas.StatusHeld}
	}
	if t == nil || !slices.Contains(want, t.Status) {
		st := fmt.Sprintf("no record for entity %q", cmd.Subject)
		if t != nil {
			st = "status " + string(t.Status)
		}
		out.Decision = reject("not-applicable", schemas.CodeNotUnresolved, fmt.Sprintf("key %q cannot be %s: %s (only %v records can)", req.Key, verb, st, want))
		return out
	}
	switch cmd.Type {
	case schemas.TypeResolve:
		out.Decision = Decision{Row: "resolve", Verdict: Resolve}
	case schemas.TypeApprove:
		if !in.ActionConfigured {
			out.Decision = reject("action-gone", schemas.CodeUnknownAction, fmt.Sprintf("held key %q: action %q is no longer configured", req.Key, t.Action))
			return out
		}
		out.Decision = Decision{Row: "approve", Verdict: Approve}
	default:
		out.Decision = Decision{Row: "release", Verdict: Release}
	}
	return out
}
