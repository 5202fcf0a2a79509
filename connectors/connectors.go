// Package connectors is the contract between the executor and an external
// system: a connector performs an action's effect and, where the system
// allows it, confirms an earlier attempt (docs/connectors.md, G3). Implement
// Connector (and Confirmer where the system can answer "did key K take
// effect?") for a system of your own, check it with the connectortest suite,
// and register it with cli.WithConnector or consumer.WithConnector.
//
// A connector only reports what it saw; the executor's Perform
// (internal/connectors/effect) is the one place that turns those
// observations into a decision: retry, confirm, execute again, or give up as
// failed or unresolved. Keeping that policy out of the connectors is what
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

// String is the kind's name in logs and test failures.
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
	// RetryAfter, on an Unavailable answer, is how long the external
	// system asked to be left alone (HTTP Retry-After): the next attempt
	// leaves no earlier. 0: it did not say.
	RetryAfter time.Duration
	// InFlight, on an Unavailable answer, says the system took nothing of
	// this request but an earlier one with the same key may still be
	// taking effect: Stripe's 409 for a key whose first request is still
	// running (an http action's statuses.not_done). The retry carries the
	// same key; if the attempts' bound passes first, the record is
	// unresolved, never failed (G3: the effect may yet happen).
	InFlight bool
	// Signal says what an answer tells about the external system as a
	// whole, for its limits and breaker (internal/connectors/limit); the Kind alone cannot:
	// a 429 and a connection refused are both Unavailable, but one asks
	// for less concurrency and the other means the system is down.
	Signal Signal
}

// Signal is what one answer says about the external system's health.
type Signal int

const (
	// SignalNone: nothing beyond the answer itself.
	SignalNone Signal = iota
	// SignalBusy: the system refused because it is overloaded (HTTP 429):
	// send less at once.
	SignalBusy
	// SignalDown: the system is unreachable or unavailable (connection
	// refused, HTTP 503): after several in a row, stop sending and probe.
	// It also counts as busy for the concurrency limit.
	SignalDown
)

// String is the signal's name in logs and test failures.
func (s Signal) String() string {
	switch s {
	case SignalBusy:
		return "busy"
	case SignalDown:
		return "down"
	}
	return "none"
}

// Connector performs the effect once. It must honour req.Deadline: no request
// may leave the process after it (checked right before writing, not only at
// the start), because a new owner relies on that deadline to know the old
// one has stopped (docs/guarantees.md#g1-single-flight across paused instances).
type Connector interface {
	Execute(ctx context.Context, req Request) Result
}

// Confirmer asks the external system whether an earlier attempt with this key
// took effect. Answers: Succeeded (with the result), NotFound, or anything
// else meaning "still unknown".
type Confirmer interface {
	Confirm(ctx context.Context, req Request) Result
}

// CanConfirmer is implemented by connectors whose type has a Confirm method
// but whose configuration may not allow confirming (http without
// confirm_url). Perform treats CanConfirm() == false as "no Confirmer".
type CanConfirmer interface {
	CanConfirm() bool
}
