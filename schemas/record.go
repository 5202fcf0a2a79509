// Package schemas holds Onceflight's wire formats: command events in, the
// execution record that the journal and the outcome events carry, and the
// CloudEvents binding between them and Kafka records.
//
// Everything an outsider can send is decoded here, so this is the package that
// must never panic on input (see the fuzz tests).
package schemas

import (
	"encoding/json"
	"time"
)

// Status is an execution record's state (docs/events.md#execution-records).
type Status string

// Record statuses. Only InProgress and Held are not final; Unresolved is final
// until a confirmation or an operator turns it into Succeeded or Failed.
const (
	StatusInProgress Status = "in_progress"
	StatusSucceeded  Status = "succeeded"
	StatusFailed     Status = "failed"
	StatusUnresolved Status = "unresolved"
	StatusRejected   Status = "rejected"
	StatusHeld       Status = "held"
)

// Final reports whether a record in this status answers repeats from the
// record instead of executing. Unresolved counts: a repeat of an unresolved
// key must not execute again (G3), it gets the unresolved record.
func (s Status) Final() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusUnresolved, StatusRejected:
		return true
	}
	return false
}

// Stable error codes (docs/events.md#execution-records). Consumers switch on these; never rename one.
const (
	CodeInvalidCommand       = "invalid_command"
	CodeUnknownAction        = "unknown_action"
	CodeNotAllowed           = "not_allowed"
	CodeVersionConflict      = "version_conflict"
	CodeKeyReused            = "idempotency_key_reused"
	CodeDuplicateBusinessKey = "duplicate_business_key"
	CodeExpired              = "expired"
	CodeKeyExpired           = "key_expired"
	CodeConnectorRejected    = "connector_rejected"
	CodeConnectorUnavailable = "connector_unavailable"
	CodeConfirmationTimeout  = "confirmation_timeout"
	CodeAmbiguous            = "ambiguous_no_confirm"
	CodeNotUnresolved        = "not_unresolved"
	CodeTooLarge             = "too_large"
	// CodeConfirmationPending is the error of an in_progress record whose
	// last attempt answered ambiguously and whose confirmation has not
	// answered yet (never a final record's).
	CodeConfirmationPending = "confirmation_pending"
)

// Error is a record's error: a stable code and a message for humans.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// CommandRef says which command a record answers and where it was consumed.
type CommandRef struct {
	ID        string `json:"id"`
	Source    string `json:"source"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Resolution records an operator's decision on an unresolved or held record.
type Resolution struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	As     Status    `json:"as"`
	// DecisionID is the id of the control command that carried the
	// decision; the settlement's outcome id derives from it (OutcomeID of key, status and this id).
	// Empty in records written before 2026-12-01.
	DecisionID string `json:"decision_id,omitempty"`
	// Offset is the position of the control command that carried the
	// decision, in the commands partition of the record (the record's
	// command.partition). A release takes effect only for commands after
	// it: a command consumed before it and consumed again (a restart
	// before the committed offset passed it) gets the answer it got the
	// first time, not a fresh execution. Absent in records written before
	// 2026-12-02, whose release applies to every later lookup.
	Offset *int64 `json:"offset,omitempty"`
}

// After reports whether a command at offset off (in the record's
// partition) comes after the decision r, so that the decision applies to
// it. A decision without a recorded position applies to every command.
func (r *Resolution) After(off int64) bool { return r.Offset == nil || off > *r.Offset }

// Record is the execution record of one idempotency key (docs/events.md#execution-records). The journal
// holds every state change of it; outcome events carry it as data.
//
// Data, Deadline, FencingToken and TraceParent are what a later owner needs to
// confirm or re-attempt an in_progress execution it inherited, so they travel
// with the record rather than living only in the command.
type Record struct {
	IdempotencyKey string          `json:"idempotency_key"`
	Entity         string          `json:"entity"`
	Action         string          `json:"action"`
	Status         Status          `json:"status"`
	Fingerprint    string          `json:"fingerprint"`
	Attempts       int             `json:"attempts"`
	EntityVersion  int64           `json:"entity_version"`
	Result         json.RawMessage `json:"result"`
	Error          *Error          `json:"error"`
	Command        CommandRef      `json:"command"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	Executor       string          `json:"executor"`
	Epoch          int64           `json:"epoch"`
	FencingToken   int64           `json:"fencing_token,omitempty"`
	Deadline       *time.Time      `json:"deadline,omitempty"`
	TraceParent    string          `json:"traceparent,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	Resolution     *Resolution     `json:"resolution,omitempty"`
	// Release, set on a final record by an operator's release (docs/events.md#execution-records),
	// frees the key: the next command with it is new work. The record
	// stays, so the journal says why the key executed again.
	Release *Resolution `json:"release,omitempty"`
	// UniqueKey is the hash of the action's unique_by tuple (docs/configuration.md),
	// "" when the action has none. It travels in the journal so a
	// restored index knows the tuple without the configuration.
	UniqueKey string `json:"unique_key,omitempty"`
	// EstablishedBy says how Status was established (EstablishedBy*);
	// "" in records written before 2026-12-02.
	EstablishedBy string `json:"established_by,omitempty"`
	// Evidence is the story of the execution as it went: every attempt's
	// answer and every confirmation, the latest 16 of them;
	// EvidenceDropped counts the older ones left out.
	Evidence        []Evidence `json:"evidence,omitempty"`
	EvidenceDropped int        `json:"evidence_dropped,omitempty"`
	Hash            string     `json:"hash"`
	PrevHash        string     `json:"prev_hash"`
}

// How a record's status was established (Record.EstablishedBy,
// docs/events.md#evidence). Wire format: never rename one.
const (
	// EstablishedByAnswer: the connector's answer to an attempt (or the
	// executor's rules applied to those answers: retries used up, an
	// ambiguous answer that cannot be confirmed).
	EstablishedByAnswer = "answer"
	// EstablishedByConfirmation: a confirm call after an ambiguous answer,
	// asked by the executor that made the attempt or by a later owner.
	EstablishedByConfirmation = "confirmation"
	// EstablishedByReconciler: the reconciler's confirmation of an
	// unresolved record.
	EstablishedByReconciler = "reconciler"
	// EstablishedByOperator: an operator's signed decision (resolve); the
	// record's resolution names it.
	EstablishedByOperator = "operator"
	// EstablishedByRule: the executor's decision rules without asking the
	// external system (a rejection: invalid, expired, reused key, ...).
	EstablishedByRule = "rule"
)

// Evidence kinds, answers and askers (docs/events.md#evidence).
const (
	EvidenceAttempt = "attempt"
	EvidenceConfirm = "confirm"

	AnswerSucceeded   = "succeeded"
	AnswerRejected    = "rejected"
	AnswerUnavailable = "unavailable"
	AnswerAmbiguous   = "ambiguous"
	AnswerFound       = "found"
	AnswerNotFound    = "not_found"
	AnswerUnknown     = "unknown"

	ByExecutor   = "executor"
	ByReconciler = "reconciler"
	ByOperator   = "operator"
)

// Evidence is one observation of the external system: an attempt and its
// answer, or a confirm call and its answer.
type Evidence struct {
	// Kind is EvidenceAttempt or EvidenceConfirm.
	Kind string `json:"kind"`
	// Attempt is the attempt's number; for a confirmation, the attempt it
	// asked about.
	Attempt      int        `json:"attempt"`
	FencingToken int64      `json:"fencing_token,omitempty"`
	At           time.Time  `json:"at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	// Answer: for an attempt succeeded, rejected, unavailable or ambiguous;
	// for a confirmation found, not_found or unknown.
	Answer string `json:"answer"`
	// By asked a confirmation: executor, reconciler or operator.
	By string `json:"by,omitempty"`
	// Detail is where the answer came from (an HTTP status, a timeout, a
	// refused connection), at most 200 bytes (wire.AddEvidence).
	Detail string `json:"detail,omitempty"`
}
