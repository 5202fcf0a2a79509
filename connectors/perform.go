package connectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/onceflight/onceflight/schemas"
)

// Outcome is where Perform leaves an execution. It is the record status the
// executor stores, so it is the schemas type itself: no mapping layer in
// which a status could be lost.
type Outcome = schemas.Status

// The three outcomes Perform can reach.
const (
	OutcomeSucceeded  = schemas.StatusSucceeded
	OutcomeFailed     = schemas.StatusFailed
	OutcomeUnresolved = schemas.StatusUnresolved
)

// Error codes carried by a Decision. The first four are the record codes of
// docs/events.md#execution-records; CodeNotStarted and CodeInterrupted are for the executor only and
// never reach a record as such (see Decision).
const (
	CodeRejected            = schemas.CodeConnectorRejected
	CodeUnavailable         = schemas.CodeConnectorUnavailable
	CodeConfirmationTimeout = schemas.CodeConfirmationTimeout
	CodeAmbiguousNoConfirm  = schemas.CodeAmbiguous

	// CodeNotStarted: the BeforeExecute hook failed, so the attempt it was
	// asked about was not sent. Outcome is OutcomeUnresolved because earlier
	// attempts of the same call may have been sent; Attempts says how many
	// were. The executor decides (typically: keep the record in_progress and
	// let a later owner Reconcile it).
	CodeNotStarted = "not_started"
	// CodeInterrupted: ctx was cancelled (shutdown, partition lost) before a
	// decision. Outcome is OutcomeUnresolved and the record must stay
	// in_progress: whoever owns the entity next Reconciles it.
	CodeInterrupted = "interrupted"
)

// Defaults of a Policy's zero fields. The actions file's defaults are
// these (internal/config), so an action and a Policy built in code agree.
const (
	DefaultTimeout        = 2 * time.Second
	DefaultMaxAttempts    = 5
	DefaultConfirmTimeout = 30 * time.Second
	// DefaultBackoffInitial and DefaultBackoffMax bound the default
	// backoff: exponential with jitter, doubling from the first to the second.
	DefaultBackoffInitial = 100 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
)

// Policy is an action's retry and confirmation policy (docs/configuration.md).
type Policy struct {
	Timeout         time.Duration // per attempt (Execute and each Confirm); default DefaultTimeout
	MaxAttempts     int           // total executions for the key, across calls; default DefaultMaxAttempts
	ConfirmTimeout  time.Duration // how long to keep asking Confirm; default DefaultConfirmTimeout
	IdempotentByKey bool          // the external system deduplicates the key itself
	// Backoff builds a fresh schedule for one retry loop. Default:
	// exponential with jitter, DefaultBackoffInitial doubling to
	// DefaultBackoffMax.
	Backoff func() backoff.BackOff
}

func (p Policy) withDefaults() Policy {
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.ConfirmTimeout <= 0 {
		p.ConfirmTimeout = DefaultConfirmTimeout
	}
	if p.Backoff == nil {
		p.Backoff = func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval = DefaultBackoffInitial
			b.MaxInterval = DefaultBackoffMax
			return b
		}
	}
	return p
}

// Decision is what Perform and Reconcile concluded.
type Decision struct {
	Outcome  Outcome
	Result   json.RawMessage // for OutcomeSucceeded
	Code     string          // when not succeeded: one of the Code* constants
	Message  string
	Attempts int // number of the last attempt executed (req.Attempt-1 if none)
}

// PerformOption adjusts one Perform or Reconcile call.
type PerformOption func(*performOptions)

type performOptions struct {
	beforeAttempt func(ctx context.Context, req *Request) error
}

// ErrStop, returned (wrapped) by a BeforeAttempt hook, ends the call
// without sending the attempt and without the doubt CodeNotStarted carries:
// the Decision is failed with the hook's error code (StopError.Code) when no
// earlier attempt may have taken effect, unresolved otherwise. The executor
// uses it for a command whose own deadline passed before the request could
// leave.
type StopError struct {
	Code    string
	Message string
}

func (e *StopError) Error() string { return e.Code + ": " + e.Message }

// WithBeforeExecute registers a hook called before every execution attempt
// with the attempt number and that attempt's deadline. The executor records
// intent there durably (in_progress, attempt, deadline) so that a new owner
// after a crash knows until when the old attempt may still be in flight (G1).
// If the hook returns an error nothing is sent and the Decision is
// OutcomeUnresolved with CodeNotStarted.
func WithBeforeExecute(fn func(ctx context.Context, attempt int, deadline time.Time) error) PerformOption {
	return func(o *performOptions) {
		o.beforeAttempt = func(ctx context.Context, req *Request) error { return fn(ctx, req.Attempt, req.Deadline) }
	}
}

// WithBeforeAttempt is WithBeforeExecute with the whole request: the hook
// sees the attempt number and deadline and may set req.FencingToken, so
// that each attempt carries a larger token than the one before (a late
// write of attempt 1 is refusable once attempt 2 was seen). The deadline is
// taken again after the hook if the hook used up more than half the
// attempt's time (a slow intent commit): the hook is then called again with
// the new deadline, so an attempt never leaves with its time used up.
func WithBeforeAttempt(fn func(ctx context.Context, req *Request) error) PerformOption {
	return func(o *performOptions) { o.beforeAttempt = fn }
}

// CanConfirmer is implemented by connectors whose type has a Confirm method
// but whose configuration may not allow confirming (http without
// confirm_url). Perform treats CanConfirm() == false as "no Confirmer".
type CanConfirmer interface {
	CanConfirm() bool
}

// ConfirmerOf returns conn's Confirmer if it has one that can answer.
func ConfirmerOf(conn Connector) (Confirmer, bool) {
	c, ok := conn.(Confirmer)
	if !ok {
		return nil, false
	}
	if cc, ok := conn.(CanConfirmer); ok && !cc.CanConfirm() {
		return nil, false
	}
	return c, true
}

// Perform executes req (attempt numbering from req.Attempt, 1 if unset) and
// drives it to a decision by the rules of docs/connectors.md and G3:
//
//   - Succeeded: succeeded. Rejected: failed connector_rejected, no retry.
//   - Unavailable: retried with backoff until MaxAttempts executions, then
//     failed connector_unavailable.
//   - Ambiguous: with a Confirmer, confirm until ConfirmTimeout; Succeeded →
//     succeeded with the confirm result, NotFound → execute again (a new
//     attempt, counted against MaxAttempts), no answer → unresolved
//     confirmation_timeout. Without one: re-execute if IdempotentByKey, else
//     unresolved ambiguous_no_confirm at once.
//
// A key is executed twice only after Confirm said NotFound or when the action
// is IdempotentByKey. Once an attempt may have taken effect and nothing
// cleared that doubt, a later Rejected or exhausted retries give unresolved,
// never failed: "failed" promises the effect did not happen.
//
// Each attempt gets its own deadline, now + Timeout, in req.Deadline and in
// its context. ctx cancellation ends the call with OutcomeUnresolved and
// CodeInterrupted.
func Perform(ctx context.Context, conn Connector, req Request, p Policy, opts ...PerformOption) Decision {
	r := newRunner(conn, p, opts)
	if req.Attempt < 1 {
		req.Attempt = 1
	}
	return r.loop(ctx, req, false)
}

// Reconcile settles an inherited in_progress or unresolved record whose last
// attempt was req.Attempt (with req.Deadline the deadline recorded for it).
// It confirms first and never executes before Confirm said NotFound; then it
// executes again as attempt req.Attempt+1 under the rules of Perform. Without
// a Confirmer it re-executes only if IdempotentByKey, else it returns
// unresolved ambiguous_no_confirm at once.
func Reconcile(ctx context.Context, conn Connector, req Request, p Policy, opts ...PerformOption) Decision {
	r := newRunner(conn, p, opts)
	p = r.p
	if req.Attempt < 0 {
		req.Attempt = 0
	}
	if ctx.Err() != nil {
		return interrupted(req.Attempt, ctx.Err())
	}
	if !r.canConfirm {
		if !p.IdempotentByKey {
			return Decision{Outcome: OutcomeUnresolved, Code: CodeAmbiguousNoConfirm,
				Message: "earlier attempt may have taken effect and the connector cannot confirm", Attempts: req.Attempt}
		}
		req.Attempt++
		return r.loop(ctx, req, true)
	}
	res, d, done := r.confirm(ctx, req)
	if done {
		return d
	}
	if res.Kind == Succeeded {
		return Decision{Outcome: OutcomeSucceeded, Result: res.Result, Attempts: req.Attempt}
	}
	req.Attempt++ // NotFound: a new attempt with the same key is safe
	return r.loop(ctx, req, false)
}

func newRunner(conn Connector, p Policy, opts []PerformOption) runner {
	r := runner{conn: conn, p: p.withDefaults()}
	for _, o := range opts {
		o(&r.o)
	}
	r.confirmer, r.canConfirm = ConfirmerOf(conn)
	return r
}

type runner struct {
	conn       Connector
	confirmer  Confirmer
	canConfirm bool
	p          Policy
	o          performOptions
}

// loop executes from req.Attempt on. mayHaveHappened says an earlier
// execution could have taken effect and no Confirm has ruled it out.
func (r *runner) loop(ctx context.Context, req Request, mayHaveHappened bool) Decision {
	retry := r.p.Backoff()
	attempt := req.Attempt
	last := "" // the last connector message, for the final Decision
	for {
		executed := attempt - 1
		if ctx.Err() != nil {
			return interrupted(executed, ctx.Err())
		}
		if attempt > r.p.MaxAttempts {
			return r.exhausted(executed, mayHaveHappened, last)
		}
		req.Attempt = attempt
		req.Deadline = time.Now().Add(r.p.Timeout)
		if r.o.beforeAttempt != nil {
			for try := 0; ; try++ {
				began := time.Now()
				err := r.o.beforeAttempt(ctx, &req)
				var stop *StopError
				switch {
				case err == nil:
				case ctx.Err() != nil:
					return interrupted(executed, ctx.Err())
				case errors.As(err, &stop) && !mayHaveHappened:
					return Decision{Outcome: OutcomeFailed, Code: stop.Code, Message: stop.Message, Attempts: executed}
				case errors.As(err, &stop):
					return Decision{Outcome: OutcomeUnresolved, Code: CodeAmbiguousNoConfirm,
						Message: "an earlier attempt may have taken effect; then " + stop.Message, Attempts: executed}
				default:
					return Decision{Outcome: OutcomeUnresolved, Code: CodeNotStarted,
						Message: fmt.Sprintf("attempt %d not started: %v", attempt, err), Attempts: executed}
				}
				if try >= 2 || time.Until(req.Deadline) >= r.p.Timeout/2 {
					break
				}
				// The hook (the executor's intent, committed in a
				// transaction) took most of the attempt's time: the next
				// try's deadline leaves room for it as well, or a commit
				// slower than the timeout would let no attempt be sent.
				req.Deadline = time.Now().Add(r.p.Timeout + time.Since(began))
			}
			// A Timeout from now at most, and never past the deadline
			// the hook recorded.
			if d := time.Now().Add(r.p.Timeout); d.Before(req.Deadline) {
				req.Deadline = d
			}
		}
		deadline := req.Deadline
		actx, cancel := context.WithDeadline(ctx, deadline)
		res := safeCall(r.conn.Execute, actx, req)
		cancel()
		executed = attempt
		last = res.Message
		// Stopped (shutdown, partition lost) while the request was out:
		// an answer that is not definite is our own stop, not the
		// service's ambiguity. The attempt stays in_progress for the next
		// owner, which waits for its deadline and confirms; it must not
		// become unresolved, which needs a person.
		if ctx.Err() != nil && res.Kind != Succeeded && res.Kind != Rejected {
			return interrupted(executed, ctx.Err())
		}

		switch NextStep(res.Kind, r.canConfirm, r.p.IdempotentByKey, mayHaveHappened) {
		case StepSucceed:
			return Decision{Outcome: OutcomeSucceeded, Result: res.Result, Attempts: executed}
		case StepFail:
			return Decision{Outcome: OutcomeFailed, Code: CodeRejected, Message: res.Message, Attempts: executed}
		case StepUnresolved:
			msg := res.Message
			if res.Kind == Rejected {
				msg = "rejected after an earlier attempt may have taken effect: " + res.Message
			}
			return Decision{Outcome: OutcomeUnresolved, Code: CodeAmbiguousNoConfirm, Message: msg, Attempts: executed}
		case StepRetry:
			// Not done; retry below.
		case StepConfirm:
			cres, d, done := r.confirm(ctx, req)
			if done {
				return d
			}
			if cres.Kind == Succeeded {
				return Decision{Outcome: OutcomeSucceeded, Result: cres.Result, Attempts: executed}
			}
			mayHaveHappened = false // NotFound: this attempt did not take effect
			last = "confirmed not found after: " + res.Message
		case StepReexecute:
			mayHaveHappened = true
		}
		if attempt >= r.p.MaxAttempts {
			return r.exhausted(executed, mayHaveHappened, last)
		}
		if err := sleep(ctx, retry.NextBackOff()); err != nil {
			return interrupted(executed, err)
		}
		attempt++
	}
}

// Step is what Perform does next with one Execute answer. It is exported so
// that a description of an action (`onceflight actions`) is derived from
// the rule the executor follows rather than written a second time.
type Step int

// The steps NextStep chooses from.
const (
	// StepSucceed: record succeeded with the answer's result.
	StepSucceed Step = iota + 1
	// StepFail: record failed connector_rejected; no retry.
	StepFail
	// StepRetry: the effect did not happen; retry with backoff while
	// attempts remain, then failed connector_unavailable (or unresolved if
	// an earlier attempt may have taken effect).
	StepRetry
	// StepConfirm: ask the Confirmer; succeeded on Succeeded, a new attempt
	// on NotFound, unresolved confirmation_timeout when it never answers.
	StepConfirm
	// StepReexecute: execute again without confirming, because the external
	// system deduplicates the key (IdempotentByKey).
	StepReexecute
	// StepUnresolved: record unresolved ambiguous_no_confirm at once.
	StepUnresolved
)

func (s Step) String() string {
	switch s {
	case StepSucceed:
		return "succeeded"
	case StepFail:
		return "failed"
	case StepRetry:
		return "retry"
	case StepConfirm:
		return "confirm"
	case StepReexecute:
		return "re-execute"
	case StepUnresolved:
		return "unresolved"
	}
	return "unknown"
}

// NextStep is Perform's rule for one Execute answer of kind k: canConfirm
// says the connector has a Confirmer that can answer (ConfirmerOf),
// idempotentByKey is the policy's IdempotentByKey, and mayHaveHappened says
// an earlier attempt of the call may have taken effect unconfirmed. A
// Rejected answer after such an attempt cannot promise "did not happen", so
// it is unresolved, not failed; an answer of any other kind (NotFound, an
// unknown one) is treated as Ambiguous, the safe side.
func NextStep(k Kind, canConfirm, idempotentByKey, mayHaveHappened bool) Step {
	switch k {
	case Succeeded:
		return StepSucceed
	case Rejected:
		if mayHaveHappened {
			return StepUnresolved
		}
		return StepFail
	case Unavailable:
		return StepRetry
	}
	switch {
	case canConfirm:
		return StepConfirm
	case idempotentByKey:
		return StepReexecute
	}
	return StepUnresolved
}

func (r *runner) exhausted(executed int, mayHaveHappened bool, last string) Decision {
	msg := fmt.Sprintf("gave up after %d attempts", executed)
	if last != "" {
		msg += ": " + last
	}
	if mayHaveHappened {
		return Decision{Outcome: OutcomeUnresolved, Code: CodeAmbiguousNoConfirm, Message: msg, Attempts: executed}
	}
	return Decision{Outcome: OutcomeFailed, Code: CodeUnavailable, Message: msg, Attempts: executed}
}

// confirm asks the Confirmer about req until it answers Succeeded or NotFound
// (returned with done == false) or until ConfirmTimeout or ctx ends it (done
// == true with the Decision to return).
//
// A NotFound obtained before req.Deadline is not trusted: until the
// attempt's deadline passes, the request may still be queued or running
// behind a proxy that already answered 504, so "not found yet" could turn
// into "found". Confirm waits for the deadline and asks again.
func (r *runner) confirm(ctx context.Context, req Request) (Result, Decision, bool) {
	cctx, cancel := context.WithTimeout(ctx, r.p.ConfirmTimeout)
	defer cancel()
	b := r.p.Backoff()
	last := ""
	for {
		asked := time.Now()
		actx, acancel := context.WithTimeout(cctx, r.p.Timeout)
		res := safeCall(r.confirmer.Confirm, actx, req)
		acancel()
		var wait time.Duration
		switch {
		case res.Kind == Succeeded:
			return res, Decision{}, false
		case res.Kind == NotFound && (req.Deadline.IsZero() || !asked.Before(req.Deadline)):
			return res, Decision{}, false
		case res.Kind == NotFound:
			wait = time.Until(req.Deadline)
			last = "not found before the attempt's deadline"
		default:
			wait = b.NextBackOff()
			last = res.Message
		}
		if ctx.Err() != nil {
			return res, interrupted(req.Attempt, ctx.Err()), true
		}
		if wait == backoff.Stop || sleep(cctx, wait) != nil {
			if ctx.Err() != nil {
				return res, interrupted(req.Attempt, ctx.Err()), true
			}
			return res, Decision{Outcome: OutcomeUnresolved, Code: CodeConfirmationTimeout,
				Message: fmt.Sprintf("no confirmation within %s: %s", r.p.ConfirmTimeout, last), Attempts: req.Attempt}, true
		}
	}
}

func interrupted(executed int, err error) Decision {
	return Decision{Outcome: OutcomeUnresolved, Code: CodeInterrupted,
		Message: fmt.Sprintf("interrupted: %v", err), Attempts: executed}
}

// sleep waits d or until ctx is done, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// safeCall runs a connector method and turns a panic into Ambiguous: the
// connector may have sent the request before it failed, so the effect is in
// doubt (G3), and one faulty connector must not crash the executor or stall
// its partition.
func safeCall(fn func(context.Context, Request) Result, ctx context.Context, req Request) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			res = Result{Kind: Ambiguous, Message: fmt.Sprintf("connector panicked: %v", p)}
		}
	}()
	return fn(ctx, req)
}
