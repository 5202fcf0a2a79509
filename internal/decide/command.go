package decide

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// Verdict is what happens to a command.
type Verdict string

// Verdicts. Each is carried out by the executor; none is chosen anywhere
// else.
const (
	// Execute runs the command through its action's connector: its
	// intent is recorded, then the attempt is sent.
	Execute Verdict = "execute"
	// Replay answers the command from the key's record: the record's own
	// command consumed again gets it republished, any other command gets
	// it with replayed: true.
	Replay Verdict = "replay"
	// Inherit settles the key's in-progress execution (left by an owner
	// that stopped): wait for its deadline plus the clock drift, confirm,
	// and answer the command with the result.
	Inherit Verdict = "inherit"
	// Reject answers the command rejected with Code; Journal says whether
	// the rejection becomes the key's record.
	Reject Verdict = "reject"
	// Hold records the command held for an operator (a suspected
	// duplicate): it waits for approve or resolve.
	Hold Verdict = "hold"
	// Settle applies an operator decision (resolve, approve, release) or a
	// reconcile request to the record it names, by the rules of
	// docs/guarantees.md#control-commands.
	Settle Verdict = "settle"
	// Skip answers nothing: the command was answered before, and the
	// key's record, written by a later command, is not its answer.
	Skip Verdict = "skip"
	// LookUpUnique asks the executor for the holder of the command's
	// unique_by tuple (an index read), then to decide again with it.
	LookUpUnique Verdict = "look_up_unique"
)

// Action is an action's policy as the decision needs it: pure functions of
// the command, evaluated only when a row needs them (a repeat never pays
// for schema validation).
type Action interface {
	SourceAllowed(source string) bool
	ValidateData(data json.RawMessage) error
	// Unique is the action's unique_by fields, nil if none, and whether a
	// duplicate is held (on_duplicate: hold) rather than rejected.
	Unique() (fields []string, hold bool)
}

// Input is everything the decision depends on, as it is at the command's
// position. The executor gathers it; Command does no I/O.
type Input struct {
	Cmd schemas.Command
	// Record is the key's record as the command sees it (Seen); nil when
	// the key is new work for it.
	Record *schemas.Record
	// ClaimedByOther: no record, and the key is claimed by another
	// command in flight with another fingerprint.
	ClaimedByOther bool
	// Action is the command's action, nil if it is not configured.
	Action Action
	// Version is the entity's version (succeeded executions).
	Version int64
	// Now is the time of the decision.
	Now time.Time
	// Keep is dedupe_retention: a final record older than it has lost its
	// result (0: kept forever).
	Keep time.Duration
	// Stub says Record is what the index keeps of a record past a
	// dedupe_retention: its result is gone, whatever Keep says now. The
	// index prunes by the retention it ran with, and one raised since (or
	// a wall clock stepped back) would otherwise replay a stub as the
	// key's outcome, with no result.
	Stub bool
	// HolderKnown says Holder was looked up (after LookUpUnique): the key
	// of another record holding the command's unique_by tuple, "" if none.
	HolderKnown bool
	Holder      string
}

// Decision is what Command decided, and the row of the decision table
// that decided it.
type Decision struct {
	Row     string
	Verdict Verdict
	// Code and Message, for Reject and Hold.
	Code, Message string
	// Journal, for Reject: the rejection becomes the key's record (false:
	// the key's record, if any, is left untouched).
	Journal bool
	// UniqueKey is the hash of the command's unique_by tuple, "" if the
	// action has none (Execute, Hold, LookUpUnique).
	UniqueKey string
	// Deadletter, for Reject (Route): the command is also copied to the
	// deadletter topic, by reference.
	Deadletter bool
	// EstablishedBy, for Settle (Performed): who established the result,
	// overriding the connector's decision ("" keeps it).
	EstablishedBy string
}

// Row is one row of the decision table: its name, when it applies (rows
// are tried in order, the first that applies decides) and what happens.
// docs/guarantees.md#decision-table shows these rows; a test keeps the two
// equal.
type Row struct {
	Name, When, Then string
}

// Rows is the decision table, in the order Command tries it.
var Rows = []Row{
	{"answered-before", "the key's record was written by a later command of the partition (this command is consumed again after a restart or a takeover)", "nothing: the command's first answer is on the outcomes topic, and the record, another command's, is not its answer"},
	{"key-reused", "the key has a record with another fingerprint", "rejected `idempotency_key_reused`; the record is untouched"},
	{"key-in-flight", "the key has no record, and another command with it and another fingerprint is in flight", "rejected `idempotency_key_reused`"},
	{"key-expired", "the key's record is final and older than `dedupe_retention`, or only its stub is kept (pruned under a shorter `dedupe_retention`)", "rejected `key_expired`; the record is untouched"},
	{"replay", "the key's record is final or held", "the record, `replayed: true` (the record's own command consumed again: republished)"},
	{"inherit", "the key's record is in progress", "wait for its deadline plus `--clock-drift`, confirm, answer with the result"},
	{"control", "a `resolve`, `approve`, `release` or reconcile request", "settled by its own rules ([control commands](#control-commands))"},
	{"expired", "the command's `deadline` has passed", "rejected `expired`"},
	{"unknown-action", "the action is not configured", "rejected `unknown_action`"},
	{"source-not-allowed", "the source is not in the action's `allowed_sources`", "rejected `not_allowed`"},
	{"invalid-data", "the data fails the action's schema", "rejected `invalid_command`"},
	{"version-conflict", "`expectedversion` differs from the entity's version", "rejected `version_conflict`"},
	{"unique-field-missing", "the data lacks a `unique_by` field", "rejected `invalid_command`"},
	{"unique-lookup", "the action has `unique_by` and the holder of the tuple is not known yet", "the executor reads the `unique_by` index and decides again"},
	{"duplicate-rejected", "another execution holds the `unique_by` tuple", "rejected `duplicate_business_key`"},
	{"too-large", "the record a hold or an execution would write, with the command's data, does not fit `max.message.bytes`", "rejected `too_large`"},
	{"duplicate-held", "the same as `duplicate-rejected`, with `on_duplicate: hold`", "held for an operator (`approve`, `resolve`)"},
	{"execute", "none of the above", "executed: intent recorded, then the attempt sent"},
}

// Command decides what happens to a command (not misrouted: forwarding is
// decided where commands are dispatched, before any record is read).
func Command(in Input) Decision {
	cmd := in.Cmd
	if rec := in.Record; rec != nil {
		switch {
		case answeredBefore(rec, cmd):
			return Decision{Row: "answered-before", Verdict: Skip}
		case rec.Fingerprint != cmd.Fingerprint:
			return rejectKeep("key-reused", schemas.CodeKeyReused, fmt.Sprintf(
				"idempotency key %q is already recorded for another command of entity %q (%s); the original record is unchanged",
				cmd.IdempotencyKey, rec.Entity, rec.Action))
		case rec.Status.Final() && rec.FinishedAt != nil && (in.Stub || (in.Keep > 0 && in.Now.Sub(*rec.FinishedAt) > in.Keep)):
			return rejectKeep("key-expired", schemas.CodeKeyExpired, fmt.Sprintf(
				"idempotency key %q finished at %s, beyond dedupe retention; its result was dropped",
				cmd.IdempotencyKey, rec.FinishedAt.Format(time.RFC3339)))
		case rec.Status == schemas.StatusInProgress:
			return Decision{Row: "inherit", Verdict: Inherit}
		default:
			return Decision{Row: "replay", Verdict: Replay}
		}
	}
	if in.ClaimedByOther {
		return rejectKeep("key-in-flight", schemas.CodeKeyReused, fmt.Sprintf(
			"idempotency key %q is used by another command in flight", cmd.IdempotencyKey))
	}
	if schemas.IsDecision(cmd.Type) || cmd.Type == schemas.TypeReconcile {
		return Decision{Row: "control", Verdict: Settle}
	}
	if cmd.Deadline != nil && in.Now.After(*cmd.Deadline) {
		return reject("expired", schemas.CodeExpired, fmt.Sprintf("deadline %s passed before the command started", cmd.Deadline.Format(time.RFC3339)))
	}
	a := in.Action
	if a == nil {
		return reject("unknown-action", schemas.CodeUnknownAction, fmt.Sprintf("action %q is not configured", cmd.Type))
	}
	if !a.SourceAllowed(cmd.Source) {
		return reject("source-not-allowed", schemas.CodeNotAllowed, fmt.Sprintf("source %q is not allowed for action %q", cmd.Source, cmd.Type))
	}
	if err := a.ValidateData(cmd.Data); err != nil {
		return reject("invalid-data", schemas.CodeInvalidCommand, fmt.Sprintf("data does not match the schema of %q: %v", cmd.Type, err))
	}
	if cmd.ExpectedVersion != nil && *cmd.ExpectedVersion != in.Version {
		return reject("version-conflict", schemas.CodeVersionConflict, fmt.Sprintf("expected entity version %d, entity %q is at %d", *cmd.ExpectedVersion, cmd.Subject, in.Version))
	}
	fields, hold := a.Unique()
	uk, err := wire.UniqueKey(fields, cmd.Data)
	if err != nil {
		return reject("unique-field-missing", schemas.CodeInvalidCommand, fmt.Sprintf("action %q: %v", cmd.Type, err))
	}
	if uk != "" && !in.HolderKnown {
		return Decision{Row: "unique-lookup", Verdict: LookUpUnique, UniqueKey: uk}
	}
	if uk != "" && in.Holder != "" {
		msg := fmt.Sprintf("entity %q already has execution %q of %s with the same %v", cmd.Subject, in.Holder, cmd.Type, fields)
		if !hold {
			d := reject("duplicate-rejected", schemas.CodeDuplicateBusinessKey, msg)
			d.UniqueKey = uk
			return d
		}
		return Decision{Row: "duplicate-held", Verdict: Hold, Code: schemas.CodeDuplicateBusinessKey, UniqueKey: uk,
			Message: msg + "; held for an operator: onceflight approve or onceflight resolve --as rejected"}
	}
	return Decision{Row: "execute", Verdict: Execute, UniqueKey: uk}
}

// Sized is the too-large row, decided once the executor has built the
// record d (Execute or Hold) would write and measured it against
// max.message.bytes: a record over it would fail the whole transaction,
// which carries every partition's work. size is what the record needs,
// limit is max.message.bytes. Any other decision is returned as it is.
func Sized(d Decision, fits bool, size, limit int) Decision {
	if fits || (d.Verdict != Execute && d.Verdict != Hold) {
		return d
	}
	what := "the command's record"
	if d.Verdict == Hold {
		what = "the held command's record"
	}
	return reject("too-large", schemas.CodeTooLarge, fmt.Sprintf("%s is %d bytes, over max.message.bytes %d with the fields it needs", what, size, limit))
}

// answeredBefore reports whether rec was written by a command after cmd
// in cmd's partition. An entity's commands are decided in partition
// order, and a lookup sees a record only once the transaction that
// journaled it committed (the index), or while it is staged in the
// partition's current assignment (the overlay) — in both cases after the
// answers staged before it, which commit in order: so cmd was answered
// before, and is consumed again (the committed offset is a low
// watermark). Its answer cannot be read from rec — the index keeps a key's
// latest record only, and the key was freed for the later command (a
// release, or a rejection that answered cmd only) — and it needs none.
func answeredBefore(rec *schemas.Record, cmd schemas.Command) bool {
	return rec.Command.Partition == cmd.Partition && rec.Command.Offset > cmd.Offset
}

// reject is a rejection that becomes the key's record (it answers that
// command again when it is consumed again; see Seen for later commands).
func reject(row, code, msg string) Decision {
	return Decision{Row: row, Verdict: Reject, Code: code, Message: msg, Journal: true}
}

// rejectKeep is a rejection that leaves the key's record as it is: the
// key belongs to another command.
func rejectKeep(row, code, msg string) Decision {
	return Decision{Row: row, Verdict: Reject, Code: code, Message: msg}
}
