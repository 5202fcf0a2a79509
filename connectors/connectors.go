// Package connectors performs an action's effect on an external system and,
// where the system allows it, confirms an earlier attempt (docs/connectors.md, G3).
//
// A connector only reports what it saw; Perform is the one place that turns
// those observations into a decision: retry, confirm, execute again, or give
// up as failed or unresolved. Keeping that policy out of the connectors is what
// makes "never two effects for one key" checkable in one file.
package connectors

import (
	"context"
	"encoding/json"
	"time"
)

// Request is one attempt at an action's effect.
type Request struct {
	Action       string
	Entity       string
	Key          string // idempotency key
	Attempt      int    // 1-based, counts executions (not confirmations)
	Deadline     time.Time
	FencingToken int64
	Data         json.RawMessage
	TraceParent  string
}

// Kind classifies what a connector observed. Every connector answer is
// exactly one of these.
type Kind int

const (
	// Succeeded: the effect happened; Result holds what to record.
	Succeeded Kind = iota + 1
	// Rejected: the effect did not and will not happen (do not retry).
	Rejected
	// Unavailable: the effect did not happen; retrying may help.
	Unavailable
	// Ambiguous: the effect may or may not have happened; confirm before
	// anything else (G3).
	Ambiguous
	// NotFound is only a Confirm answer: the system says the effect did not
	// happen, so a new attempt with the same key is safe.
	NotFound
)

func (k Kind) String() string {
	switch k {
	case Succeeded:
		return "succeeded"
	case Rejected:
		return "rejected"
	case Unavailable:
		return "unavailable"
	case Ambiguous:
		return "ambiguous"
	case NotFound:
		return "not_found"
	}
	return "unknown"
}

// Result is a connector's answer to Execute or Confirm.
type Result struct {
	Kind    Kind
	Result  json.RawMessage // recorded result for Succeeded (JSON)
	Message string          // why, for Rejected/Unavailable/Ambiguous
}

// Connector performs the effect once. It must honour req.Deadline: no request
// may leave the process after it (checked right before writing, not only at
// the start), because a new owner relies on that deadline to know the old
// one has stopped (docs/guarantees.md#g1-single-flight across paused instances).
type Connector interface {
	Execute(ctx context.Context, req Request) Result
}

// Effectless is implemented by a connector whose Execute leaves nothing
// outside the process (noop without an effects file). The executor records
// no intent before its attempts: with no effect there is nothing a crash
// could double, overlap or leave ambiguous, so the final record alone keeps
// G1–G3 (DESIGN.md, "Where the intent is skipped").
type Effectless interface {
	Effectless() bool
}

// Confirmer asks the external system whether an earlier attempt with this key
// took effect. Answers: Succeeded (with the result), NotFound, or anything
// else meaning "still unknown".
type Confirmer interface {
	Confirm(ctx context.Context, req Request) Result
}
