// Package effect performs an action's effect through its connector and,
// where the system allows it, confirms an earlier attempt (docs/connectors.md,
// G3). It is the one place that turns what a connector observed (package
// connectors) into a decision: retry, confirm, execute again, or give up as
// failed or unresolved, so that "never two effects for one key" is checkable
// in one file. The executor, the connectortest suite and `onceflight actions`
// (NextStep) use it; it is internal because its options are the executor's
// hooks, not a connector author's.
package effect

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// Codes of a Decision that are not record codes: the executor's only,
// they never reach a record as such (see Decision). The record codes are
// schemas.Code*.
const (
	// CodeNotStarted: the WithBeforeAttempt hook failed, so the attempt it was
	// asked about was not sent. Outcome is schemas.StatusUnresolved because earlier
	// attempts of the same call may have been sent; Attempts says how many
	// were. The executor decides (typically: keep the record in_progress and
	// let a later owner Reconcile it).
	CodeNotStarted = "not_started"
	// CodeInterrupted: ctx was cancelled (shutdown, partition lost) before a
	// decision. Outcome is schemas.StatusUnresolved and the record must stay
	// in_progress: whoever owns the entity next Reconciles it.
	CodeInterrupted = "interrupted"
	// CodeSteppedAside: the Gate told the call to step aside (ErrStepAside)
	// before it sent anything, or when every request it sent was answered
	// "not done". Outcome is schemas.StatusUnresolved, but nothing can
	// have taken effect and nothing more is to be recorded: the executor
	// brings the command back later (the WithNotDone hook recorded that
	// nothing is in flight).
	CodeSteppedAside = "stepped_aside"
)

// ErrStepAside is a Gate's answer to a call that should give its place up
// rather than wait for a system that is down
// (limit.System.AcquireOrStepAside): waiting, it would hold its command in
// the executor's memory for nothing but a turn. Perform then decides
// nothing (CodeSteppedAside) unless a request it sent may have taken
// effect (an answer that said an earlier request is still in flight):
// then it gives up as when the wait ended. A Gate answers it only to a
// call whose requests, if any, were all answered "not done".
var ErrStepAside = errors.New("the external system is down and enough commands wait for it: step aside")

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
	// DefaultGiveUpAfter is generous on purpose: an external system that
	// says "not done" (429, 503, connection refused) is usually busy or
	// restarting, and a refund must not fail because it took a while.
	DefaultGiveUpAfter = time.Hour
)

// Policy is an action's retry and confirmation policy (docs/configuration.md).
type Policy struct {
	Timeout     time.Duration // per attempt (Execute and each Confirm); default DefaultTimeout
	MaxAttempts int           // executions for the key that may have had an effect, across calls; default DefaultMaxAttempts
	// GiveUpAfter bounds, per call, how long "not done" answers are
	// retried (and the Gate waited for); default DefaultGiveUpAfter.
	GiveUpAfter     time.Duration
	ConfirmTimeout  time.Duration // how long to keep asking Confirm; default DefaultConfirmTimeout
	IdempotentByKey bool          // the external system deduplicates the key itself
	// ClockDrift is how far the external system's clock may lag ours
	// (the executor's --clock-drift). It honours an attempt's deadline by
	// its own clock, so until the deadline plus ClockDrift has passed by
	// ours a request still on its way may yet take effect, and a Confirm
	// answering NotFound before then is asked again rather than trusted:
	// trusting it would execute the key a second time beside the late
	// first attempt (G3). A new owner inheriting the attempt waits the
	// same margin (docs/guarantees.md, G1).
	ClockDrift time.Duration
	// LookupLag is how long after an attempt's deadline (plus ClockDrift)
	// the connector's lookup may still not show a write the attempt made:
	// the action's lookup_lag, for an API whose list or search answers
	// from an eventually consistent index. A Confirm answering NotFound
	// before then is asked again rather than trusted, as within
	// ClockDrift: trusted, it would execute the key a second time beside
	// an effect the lookup did not show yet (G3). 0: the lookup shows a
	// write as soon as it is made.
	LookupLag time.Duration
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
	if p.GiveUpAfter <= 0 {
		p.GiveUpAfter = DefaultGiveUpAfter
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
	Outcome  schemas.Status  // succeeded, failed or unresolved
	Result   json.RawMessage // for schemas.StatusSucceeded
	Code     string          // when not succeeded: one of the Code* constants
	Message  string
	Attempts int // number of the last attempt executed (req.Attempt-1 if none)
	// EstablishedBy says what settled Outcome: schemas.EstablishedByAnswer
	// (an attempt's answer, or the rules applied to the answers),
	// EstablishedByConfirmation (a confirm call) or EstablishedByRule (the
	// command's deadline, before anything was learnt from the system).
	// "" is answer.
	EstablishedBy string
}

// PerformOption adjusts one Perform or Reconcile call: a With* function's
// result, Options of several, or a *Call.
type PerformOption interface {
	apply(*performOptions)
}

// optionFunc is a PerformOption made by a With* function.
type optionFunc func(*performOptions)

func (f optionFunc) apply(o *performOptions) { f(o) }

type performOptions struct {
	beforeAttempt func(ctx context.Context, req *connectors.Request) error
	notDone       func(ctx context.Context, req *connectors.Request, res connectors.Result)
	lastNotDone   bool
	gate          Gate
	slot          Slot
	notAfter      time.Time
	evidence      func(ctx context.Context, req *connectors.Request, ev schemas.Evidence)
	// hooks is a Call's: each of its methods is called where the hook
	// above of the same name is nil (an option after the Call sets one).
	hooks Hooks
}

// Hooks are the BeforeAttempt, NotDone and Evidence hooks of a call as
// the methods of one value (see WithBeforeAttempt, WithNotDone and
// WithEvidence for what each is for and when it is called).
type Hooks interface {
	BeforeAttempt(ctx context.Context, req *connectors.Request) error
	NotDone(ctx context.Context, req *connectors.Request, res connectors.Result)
	Evidence(ctx context.Context, req *connectors.Request, ev schemas.Evidence)
}

// Call is the options of one call as a single PerformOption: Hooks (nil
// for none), the Gate and Slot (WithGate, WithSlot) and the command's
// deadline (WithNotAfter, zero for none). The executor builds one per
// command inside a value it allocates anyway, where a With* option per
// hook is a closure each (with the hooks' own closures, ~10 heap objects
// per command).
type Call struct {
	Hooks    Hooks
	Gate     Gate
	Slot     Slot
	NotAfter time.Time
}

func (c *Call) apply(o *performOptions) {
	if c.Hooks != nil {
		o.hooks, o.beforeAttempt, o.notDone, o.evidence = c.Hooks, nil, nil, nil
	}
	if c.Gate != nil {
		o.gate = c.Gate
	}
	if c.Slot != nil {
		o.slot = c.Slot
	}
	if !c.NotAfter.IsZero() {
		o.notAfter = c.NotAfter
	}
}

// Slot is a bound taken once the Gate admitted a request and given back
// with its answer (WithSlot).
type Slot interface {
	// Take waits for room, or until ctx ends.
	Take(ctx context.Context) error
	// Give gives back what Take took.
	Give()
}

// WithEvidence registers fn, called with every attempt's answer as soon as
// it came (before anything is done with it) and with every confirmation's
// settled answer (found, not_found, or unknown when confirming gave up),
// with the request it concerns. The executor writes them into the record as
// the execution goes; fn may block (it records an ambiguous answer durably
// before the confirmation is asked, so a crash in between leaves a record
// that says "ambiguous, confirmation pending").
func WithEvidence(fn func(ctx context.Context, req *connectors.Request, ev schemas.Evidence)) PerformOption {
	return optionFunc(func(o *performOptions) { o.evidence = fn })
}

// observe hands ev to the WithEvidence hook, if any.
func (r *runner) observe(ctx context.Context, req *connectors.Request, ev schemas.Evidence) {
	if r.o.evidence == nil && r.o.hooks == nil {
		return
	}
	// "HTTP 504: " with an empty body reads "HTTP 504".
	ev.Detail = wire.TruncateDetail(strings.TrimRight(ev.Detail, ": "))
	if r.o.evidence != nil {
		r.o.evidence(ctx, req, ev)
	} else {
		r.o.hooks.Evidence(ctx, req, ev)
	}
}

// hasBefore says whether a BeforeAttempt hook is set.
func (r *runner) hasBefore() bool { return r.o.beforeAttempt != nil || r.o.hooks != nil }

// beforeAttempt calls the BeforeAttempt hook (hasBefore).
func (r *runner) beforeAttempt(ctx context.Context, req *connectors.Request) error {
	if r.o.beforeAttempt != nil {
		return r.o.beforeAttempt(ctx, req)
	}
	return r.o.hooks.BeforeAttempt(ctx, req)
}

// notDone calls the NotDone hook, if any.
func (r *runner) notDone(ctx context.Context, req *connectors.Request, res connectors.Result) {
	switch {
	case r.o.notDone != nil:
		r.o.notDone(ctx, req, res)
	case r.o.hooks != nil:
		r.o.hooks.NotDone(ctx, req, res)
	}
}

// AnswerOf is the evidence answer class of an Execute answer of kind k:
// anything that is not definite is ambiguous, as Perform treats it.
func AnswerOf(k connectors.Kind) string {
	switch k {
	case connectors.Succeeded:
		return schemas.AnswerSucceeded
	case connectors.Rejected:
		return schemas.AnswerRejected
	case connectors.Unavailable:
		return schemas.AnswerUnavailable
	}
	return schemas.AnswerAmbiguous
}

// Options joins several options into one, for a caller that hands a
// single option on.
func Options(opts ...PerformOption) PerformOption {
	return optionFunc(func(o *performOptions) {
		for _, f := range opts {
			f.apply(o)
		}
	})
}

// WithNotDone registers a hook called after an attempt answered "not
// done" (Unavailable) while no earlier attempt may have taken effect,
// before the wait for the next one. The executor records there that
// nothing is in flight and nothing happened, so that a new owner taking
// over a command that waits (an outage, a long Retry-After) executes
// again instead of confirming, or leaving it unresolved when it cannot
// confirm (WithLastNotDone). A hook that fails leaves the intent as the
// last record: the new owner confirms, the safe side.
func WithNotDone(fn func(ctx context.Context, req *connectors.Request, res connectors.Result)) PerformOption {
	return optionFunc(func(o *performOptions) { o.notDone = fn })
}

// WithLastNotDone tells Reconcile that the inherited attempt was answered
// "not done" with nothing before it in doubt (a record WithNotDone
// wrote): it executes again at once, without confirming, and the
// inherited attempts use up none of MaxAttempts.
func WithLastNotDone() PerformOption {
	return optionFunc(func(o *performOptions) { o.lastNotDone = true })
}

// WithGate sends every request of the call (Execute and Confirm) through
// g: the external system's limits and breaker. The permit is taken before
// the BeforeAttempt hook, so an attempt's deadline is set only once the
// system will take it, and given back with the answer.
func WithGate(g Gate) PerformOption {
	return optionFunc(func(o *performOptions) { o.gate = g })
}

// WithSlot takes a slot (the executor's per-partition bound) once the
// Gate admitted a request, and releases it with the answer: a command
// waiting for a limit, a Retry-After or a breaker holds no slot.
func WithSlot(s Slot) PerformOption {
	return optionFunc(func(o *performOptions) { o.slot = s })
}

// WithNotAfter bounds the call's waits by the command's own deadline as
// well as GiveUpAfter: a command is not kept waiting past the time its
// sender stopped caring.
func WithNotAfter(t time.Time) PerformOption {
	return optionFunc(func(o *performOptions) { o.notAfter = t })
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

// WithBeforeAttempt registers a hook called before every execution attempt
// with the request as it will be sent: its attempt number and deadline. The
// executor records intent there durably (in_progress, attempt, deadline) so
// that a new owner after a crash knows until when the old attempt may still
// be in flight (G1). If the hook returns an error nothing is sent and the
// Decision is schemas.StatusUnresolved with CodeNotStarted.
//
// The hook may set req.FencingToken, so
// that each attempt carries a larger token than the one before (a late
// write of attempt 1 is refusable once attempt 2 was seen). The deadline is
// taken again after the hook if the hook used up more than half the
// attempt's time (a slow intent commit): the hook is then called again with
// the new deadline, so an attempt never leaves with its time used up.
func WithBeforeAttempt(fn func(ctx context.Context, req *connectors.Request) error) PerformOption {
	return optionFunc(func(o *performOptions) { o.beforeAttempt = fn })
}

// ConfirmerOf returns conn's Confirmer if it has one that can answer.
func ConfirmerOf(conn connectors.Connector) (connectors.Confirmer, bool) {
	c, ok := conn.(connectors.Confirmer)
	if !ok {
		return nil, false
	}
	if cc, ok := conn.(connectors.CanConfirmer); ok && !cc.CanConfirm() {
		return nil, false
	}
	return c, true
}

// Perform executes req (attempt numbering from req.Attempt, 1 if unset) and
// drives it to a decision by the rules of docs/connectors.md and G3:
//
//   - Succeeded: succeeded. Rejected: failed connector_rejected, no retry.
//   - Unavailable ("not done"): retried with backoff and jitter, no earlier
//     than the answer's RetryAfter, without using up an attempt, until
//     GiveUpAfter or the command's deadline (WithNotAfter), then failed
//     connector_unavailable with the last answer and the number of waits.
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
// its context. ctx cancellation ends the call with schemas.StatusUnresolved and
// CodeInterrupted.
func Perform(ctx context.Context, conn connectors.Connector, req connectors.Request, p Policy, opts ...PerformOption) Decision {
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
func Reconcile(ctx context.Context, conn connectors.Connector, req connectors.Request, p Policy, opts ...PerformOption) Decision {
	r := newRunner(conn, p, opts)
	p = r.p
	if req.Attempt < 0 {
		req.Attempt = 0
	}
	if ctx.Err() != nil {
		return interrupted(req.Attempt, ctx.Err())
	}
	if r.o.lastNotDone {
		r.credit = req.Attempt
		req.Attempt++
		return r.loop(ctx, req, false)
	}
	if !r.canConfirm {
		if !p.IdempotentByKey {
			return Decision{Outcome: schemas.StatusUnresolved, Code: schemas.CodeAmbiguous,
				Message: "earlier attempt may have taken effect and the connector cannot confirm", Attempts: req.Attempt, EstablishedBy: schemas.EstablishedByRule}
		}
		req.Attempt++
		return r.loop(ctx, req, true)
	}
	res, d, done := r.confirm(ctx, req)
	if done {
		return d
	}
	if res.Kind == connectors.Succeeded {
		return Decision{Outcome: schemas.StatusSucceeded, Result: res.Result, Attempts: req.Attempt, EstablishedBy: schemas.EstablishedByConfirmation}
	}
	req.Attempt++ // NotFound: a new attempt with the same key is safe
	return r.loop(ctx, req, false)
}

func newRunner(conn connectors.Connector, p Policy, opts []PerformOption) runner {
	r := runner{conn: conn, p: p.withDefaults()}
	for _, o := range opts {
		if c, ok := o.(*Call); ok {
			c.apply(&r.o) // a static call: r stays on the stack
			continue
		}
		// Another option, called through the interface, would move r to
		// the heap wherever it is called: it gets a copy of its own.
		po := new(performOptions)
		*po = r.o
		o.apply(po)
		r.o = *po
	}
	r.confirmer, r.canConfirm = ConfirmerOf(conn)
	return r
}

type runner struct {
	conn       connectors.Connector
	confirmer  connectors.Confirmer
	canConfirm bool
	p          Policy
	o          performOptions
	// boundIsDeadline: the waits end at the command's deadline, not at
	// GiveUpAfter (waitUntil).
	boundIsDeadline bool
	// credit is the number of earlier attempts known to have been "not
	// done" (WithLastNotDone): they use up no attempt.
	credit int
}

// loop executes from req.Attempt on. mayHaveHappened says an earlier
// execution could have taken effect and no Confirm has ruled it out.
//
// An Unavailable answer ("not done": the effect did not happen) uses up no
// attempt: MaxAttempts counts executions that may have had an effect, and
// "not done" is retried, no earlier than the system's Retry-After, until
// GiveUpAfter or the command's deadline (WithNotAfter) ends the wait.
func (r *runner) loop(ctx context.Context, req connectors.Request, mayHaveHappened bool) Decision {
	var retry backOff
	retry.make = r.p.Backoff
	attempt := req.Attempt
	last := ""          // the last connector message, for the final Decision
	notDone := r.credit // answers that said the effect did not happen
	sent := false
	var notBefore time.Time // the earliest next attempt: backoff, Retry-After
	until := r.waitUntil(time.Now())
	for {
		executed := attempt - 1
		if ctx.Err() != nil {
			return interrupted(executed, ctx.Err())
		}
		if attempt-notDone > r.p.MaxAttempts {
			return r.exhausted(executed, mayHaveHappened, last)
		}
		b := newBounds(ctx, until)
		wctx := &b.admit
		adm, err := r.admit(wctx, notBefore)
		wctx.cancel()
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(executed, ctx.Err())
			}
			if errors.Is(err, ErrStepAside) && !mayHaveHappened {
				return Decision{Outcome: schemas.StatusUnresolved, Code: CodeSteppedAside, Message: err.Error(), Attempts: executed}
			}
			return r.gaveUp(executed, notDone, sent, mayHaveHappened, last, 0)
		}
		req.Attempt = attempt
		req.Deadline = time.Now().Add(r.p.Timeout)
		if r.hasBefore() {
			if d, stop := r.beforeHolding(ctx, &req, executed, mayHaveHappened, adm); stop {
				return d
			}
		}
		actx := b.attemptBy(req.Deadline)
		began := time.Now()
		res := safeCall(r.conn.Execute, actx, req)
		// One clock read for the answer: the Gate's latency and the
		// evidence's end.
		ended := time.Now()
		actx.cancel()
		// Stopped (shutdown, partition lost) while the request was out:
		// an answer that is not definite is our own stop, not the
		// service's ambiguity. The attempt stays in_progress for the next
		// owner, which waits for its deadline and confirms; it must not
		// become unresolved, which needs a person. Nor does it tell the
		// Gate anything about the system: taken for an answer it would
		// close a breaker whose probe it was (every waiting command then
		// goes to a system that is down) and reset its count of
		// consecutive "down" answers.
		if ctx.Err() != nil && res.Kind != connectors.Succeeded && res.Kind != connectors.Rejected {
			adm.done(connectors.Result{}, ended.Sub(began))
			return interrupted(attempt, ctx.Err())
		}
		adm.done(res, ended.Sub(began))
		executed, sent = attempt, true
		last = res.Message
		r.observe(ctx, &req, schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: attempt, FencingToken: req.FencingToken,
			At: began.UTC(), EndedAt: ptr(ended.UTC()), Answer: AnswerOf(res.Kind), Detail: answerDetail(res, ended.Sub(began))})

		switch NextStep(res.Kind, r.canConfirm, r.p.IdempotentByKey, mayHaveHappened) {
		case StepSucceed:
			return Decision{Outcome: schemas.StatusSucceeded, Result: res.Result, Attempts: executed}
		case StepFail:
			return Decision{Outcome: schemas.StatusFailed, Code: schemas.CodeConnectorRejected, Message: res.Message, Attempts: executed}
		case StepUnresolved:
			msg := res.Message
			if res.Kind == connectors.Rejected {
				msg = "rejected after an earlier attempt may have taken effect: " + res.Message
			}
			return Decision{Outcome: schemas.StatusUnresolved, Code: schemas.CodeAmbiguous, Message: msg, Attempts: executed}
		case StepRetry:
			// Not done: no attempt used up; wait and try again.
			notDone++
			if res.InFlight {
				// Not this request, but an earlier one may yet take
				// effect: from here on, giving up is not "failed".
				mayHaveHappened = true
			}
			if res.RetryAfter > 0 && time.Now().Add(res.RetryAfter).After(until) {
				// The system asked for a wait that ends past the
				// bound: no request may leave before it, so waiting
				// it out could only end in the same decision, later,
				// with the entity's next commands held behind it.
				return r.gaveUp(executed, notDone, sent, mayHaveHappened, last, res.RetryAfter)
			}
			if !mayHaveHappened {
				r.notDone(ctx, &req, res)
			}
			notBefore = time.Now().Add(retryWait(retry.NextBackOff(), res.RetryAfter))
			attempt++
			continue
		case StepConfirm:
			asked := time.Now()
			cres, d, done := r.confirm(ctx, req)
			if done {
				return d
			}
			if !r.boundIsDeadline {
				// Confirming is not waiting for the system to take
				// the request: give_up_after does not count it.
				until = until.Add(time.Since(asked))
			}
			if cres.Kind == connectors.Succeeded {
				return Decision{Outcome: schemas.StatusSucceeded, Result: cres.Result, Attempts: executed, EstablishedBy: schemas.EstablishedByConfirmation}
			}
			mayHaveHappened = false // NotFound: this attempt did not take effect
			last = "confirmed not found after: " + res.Message
		case StepReexecute:
			mayHaveHappened = true
		}
		if attempt-notDone >= r.p.MaxAttempts {
			return r.exhausted(executed, mayHaveHappened, last)
		}
		notBefore = time.Now().Add(retry.NextBackOff())
		attempt++
	}
}

// beforeHolding is before while adm is held: adm is given back when the
// attempt is not sent, and also when the hook panics. The executor survives
// a panic in its hooks (it answers the command unresolved, consumer's
// safeHandle), so a permit kept by one would be a slot of the external
// system lost until a restart, and the breaker's probe would be lost with
// it: a half-open breaker whose probe never answers sends nothing again.
func (r *runner) beforeHolding(ctx context.Context, req *connectors.Request, executed int, mayHaveHappened bool, adm admission) (d Decision, stop bool) {
	returned := false
	defer func() {
		if !returned || stop {
			adm.done(connectors.Result{}, 0)
		}
	}()
	d, stop = r.before(ctx, req, executed, mayHaveHappened)
	returned = true
	return d, stop
}

// before runs the BeforeAttempt hook for req (the executor's intent). It
// returns stop == true with the Decision to return when the attempt must
// not be sent.
func (r *runner) before(ctx context.Context, req *connectors.Request, executed int, mayHaveHappened bool) (Decision, bool) {
	for try := 0; ; try++ {
		began := time.Now()
		if err := r.beforeAttempt(ctx, req); err != nil {
			return r.notStarted(ctx, req, err, executed, mayHaveHappened), true
		}
		if try >= 2 || time.Until(req.Deadline) >= r.p.Timeout/2 {
			break
		}
		// The hook (the executor's intent, committed in a transaction)
		// took most of the attempt's time: the next try's deadline
		// leaves room for it as well, or a commit slower than the
		// timeout would let no attempt be sent.
		req.Deadline = time.Now().Add(r.p.Timeout + time.Since(began))
	}
	// A Timeout from now at most, and never past the deadline the hook
	// recorded.
	if d := time.Now().Add(r.p.Timeout); d.Before(req.Deadline) {
		req.Deadline = d
	}
	return Decision{}, false
}

// notStarted is the Decision when the BeforeAttempt hook refused req
// with err.
func (r *runner) notStarted(ctx context.Context, req *connectors.Request, err error, executed int, mayHaveHappened bool) Decision {
	var stop *StopError
	switch {
	case ctx.Err() != nil:
		return interrupted(executed, ctx.Err())
	case errors.As(err, &stop) && !mayHaveHappened:
		return Decision{Outcome: schemas.StatusFailed, Code: stop.Code, Message: stop.Message, Attempts: executed, EstablishedBy: schemas.EstablishedByRule}
	case errors.As(err, &stop):
		return Decision{Outcome: schemas.StatusUnresolved, Code: schemas.CodeAmbiguous,
			Message: "an earlier attempt may have taken effect; then " + stop.Message, Attempts: executed}
	default:
		return Decision{Outcome: schemas.StatusUnresolved, Code: CodeNotStarted,
			Message: fmt.Sprintf("attempt %d not started: %v", req.Attempt, err), Attempts: executed}
	}
}

// backOff is a retry schedule built on its first use: most calls end
// with their first attempt and never wait (the default schedule is a
// heap object per call otherwise).
type backOff struct {
	make func() backoff.BackOff
	b    backoff.BackOff
}

// NextBackOff is the schedule's next wait.
func (b *backOff) NextBackOff() time.Duration {
	if b.b == nil {
		b.b = b.make()
	}
	return b.b.NextBackOff()
}

// retryWait is the wait before retrying a "not done" answer: the backoff,
// or the system's Retry-After when that is longer, plus up to a fifth of
// it (at most a second) of jitter, so that commands told "1 second"
// together do not all come back in the same millisecond.
func retryWait(backoffWait, retryAfter time.Duration) time.Duration {
	if retryAfter <= backoffWait {
		return backoffWait
	}
	return retryAfter + rand.N(min(retryAfter/5, time.Second)+1)
}

// waitUntil is the end of one call's waits (backoff, Retry-After, the
// Gate): GiveUpAfter from start, or the command's own deadline if sooner.
func (r *runner) waitUntil(start time.Time) time.Time {
	until := start.Add(r.p.GiveUpAfter)
	r.boundIsDeadline = false
	if !r.o.notAfter.IsZero() && r.o.notAfter.Before(until) {
		until, r.boundIsDeadline = r.o.notAfter, true
	}
	return until
}

// admission is what admit took: the Gate's permit and the slot, nil
// for none.
type admission struct {
	permit Permit
	slot   Slot
}

// done gives both back with the attempt's answer.
func (a admission) done(res connectors.Result, took time.Duration) {
	if a.slot != nil {
		a.slot.Give()
	}
	if a.permit != nil {
		a.permit.Done(res, took)
	}
}

// admit waits until notBefore and for the Gate and the slot (WithGate,
// WithSlot); the admission's done gives both back with the attempt's
// answer.
func (r *runner) admit(ctx context.Context, notBefore time.Time) (admission, error) {
	var a admission
	if r.o.gate != nil {
		permit, err := r.o.gate.Acquire(ctx, notBefore)
		if err != nil {
			return admission{}, err
		}
		a.permit = permit
	} else if err := Sleep(ctx, time.Until(notBefore)); err != nil {
		return admission{}, err
	} else if ctx.Err() != nil {
		return admission{}, ctx.Err()
	}
	if r.o.slot != nil {
		if err := r.o.slot.Take(ctx); err != nil {
			a.done(connectors.Result{}, 0)
			return admission{}, err
		}
		a.slot = r.o.slot
	}
	return a, nil
}

// gaveUp is the Decision when the waits of a call ran out (GiveUpAfter or
// the command's deadline) while the system kept answering "not done" or
// the Gate kept the request back, or when the last answer's Retry-After
// (retryAfter, else 0) ends after them.
func (r *runner) gaveUp(executed, waits int, sent, mayHaveHappened bool, last string, retryAfter time.Duration) Decision {
	bound := fmt.Sprintf("give_up_after (%s)", r.p.GiveUpAfter)
	if r.boundIsDeadline {
		if !sent && !mayHaveHappened && waits == 0 {
			return Decision{Outcome: schemas.StatusFailed, Code: schemas.CodeExpired,
				Message: fmt.Sprintf("deadline %s passed while waiting for the external system's limits", r.o.notAfter.UTC().Format(time.RFC3339)), Attempts: executed,
				EstablishedBy: schemas.EstablishedByRule}
		}
		bound = "the command's deadline (" + r.o.notAfter.UTC().Format(time.RFC3339) + ")"
	}
	msg := "gave up at " + bound
	if retryAfter > 0 {
		msg = fmt.Sprintf("gave up at once: the external system's Retry-After (%s) ends after %s", retryAfter, bound)
	}
	if last != "" {
		msg += "; last answer: " + last
	} else {
		msg += "; no answer: the external system's limits or breaker kept the request back"
	}
	msg += fmt.Sprintf("; waited %d times", waits)
	by := schemas.EstablishedByAnswer
	if !sent {
		by = schemas.EstablishedByRule // nothing was asked of the system in this call
	}
	if mayHaveHappened {
		return Decision{Outcome: schemas.StatusUnresolved, Code: schemas.CodeAmbiguous, Message: "an earlier attempt may have taken effect; then " + msg, Attempts: executed, EstablishedBy: by}
	}
	return Decision{Outcome: schemas.StatusFailed, Code: schemas.CodeConnectorUnavailable, Message: msg, Attempts: executed, EstablishedBy: by}
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
	// StepRetry: the effect did not happen; retry with backoff, no earlier
	// than the system's Retry-After and without using up an attempt, until
	// GiveUpAfter or the command's deadline, then failed
	// connector_unavailable (or unresolved if an earlier attempt may have
	// taken effect).
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
func NextStep(k connectors.Kind, canConfirm, idempotentByKey, mayHaveHappened bool) Step {
	switch k {
	case connectors.Succeeded:
		return StepSucceed
	case connectors.Rejected:
		if mayHaveHappened {
			return StepUnresolved
		}
		return StepFail
	case connectors.Unavailable:
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
		return Decision{Outcome: schemas.StatusUnresolved, Code: schemas.CodeAmbiguous, Message: msg, Attempts: executed}
	}
	return Decision{Outcome: schemas.StatusFailed, Code: schemas.CodeConnectorUnavailable, Message: msg, Attempts: executed}
}

// confirm asks the Confirmer about req until it answers Succeeded or NotFound
// (returned with done == false) or until ConfirmTimeout or ctx ends it (done
// == true with the Decision to return).
//
// A NotFound obtained before req.Deadline plus ClockDrift is not trusted:
// until then the request may still be queued or running behind a proxy
// that already answered 504 (or reach a system whose clock lags), so "not
// found yet" could turn into "found". Confirm waits for that moment and
// asks again. Nor is one obtained before LookupLag more has passed (a
// lookup that shows a write only some time after it was made): then the
// lookup is asked again with backoff, so that a write it comes to show is
// found early, and last at that moment. These waits are not part of
// ConfirmTimeout, which bounds how long the system is asked once its
// answer can settle the question: counted in it, a confirm_timeout
// shorter than the attempt's timeout plus the clock drift and the lag
// would make every NotFound unresolved.
func (r *runner) confirm(ctx context.Context, req connectors.Request) (connectors.Result, Decision, bool) {
	first := time.Now()
	// drifted is when a request still on its way can no longer land;
	// settled when the lookup shows whatever it made. An attempt without
	// a deadline counts from the first question.
	drifted := first
	if !req.Deadline.IsZero() {
		drifted = req.Deadline.Add(r.p.ClockDrift)
	}
	settled := drifted.Add(r.p.LookupLag)
	bound := r.p.ConfirmTimeout + max(0, time.Until(settled))
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	b := r.p.Backoff()
	last := ""
	// gaveUp records the confirmation's unknown answer and returns the
	// unresolved Decision.
	gaveUp := func(res connectors.Result, msg string) (connectors.Result, Decision, bool) {
		r.observe(ctx, &req, schemas.Evidence{Kind: schemas.EvidenceConfirm, Attempt: req.Attempt, At: first.UTC(),
			EndedAt: ptr(time.Now().UTC()), Answer: schemas.AnswerUnknown, Detail: msg})
		return res, Decision{Outcome: schemas.StatusUnresolved, Code: schemas.CodeConfirmationTimeout, Message: msg, Attempts: req.Attempt,
			EstablishedBy: schemas.EstablishedByConfirmation}, true
	}
	for {
		adm, err := r.admit(cctx, time.Time{})
		if err != nil {
			if ctx.Err() != nil {
				return connectors.Result{}, interrupted(req.Attempt, ctx.Err()), true
			}
			return gaveUp(connectors.Result{}, fmt.Sprintf("no confirmation within %s: %s", r.p.ConfirmTimeout, cmp.Or(last, "the external system's limits or breaker kept the request back")))
		}
		asked := time.Now()
		actx, acancel := context.WithTimeout(cctx, r.p.Timeout)
		res := safeCall(r.confirmer.Confirm, actx, req)
		acancel()
		// A Confirm answer is not an Execute answer: it tells the Gate
		// nothing about the system's load.
		adm.done(connectors.Result{}, time.Since(asked))
		var wait time.Duration
		switch {
		case res.Kind == connectors.Succeeded:
			r.observe(ctx, &req, schemas.Evidence{Kind: schemas.EvidenceConfirm, Attempt: req.Attempt, At: first.UTC(),
				EndedAt: ptr(time.Now().UTC()), Answer: schemas.AnswerFound, Detail: res.Message})
			return res, Decision{}, false
		case res.Kind == connectors.NotFound && !asked.Before(settled):
			r.observe(ctx, &req, schemas.Evidence{Kind: schemas.EvidenceConfirm, Attempt: req.Attempt, At: first.UTC(),
				EndedAt: ptr(time.Now().UTC()), Answer: schemas.AnswerNotFound, Detail: res.Message})
			return res, Decision{}, false
		case res.Kind == connectors.NotFound && asked.Before(drifted):
			wait = time.Until(drifted)
			last = "not found before the attempt's deadline (plus the clock drift) passed"
		case res.Kind == connectors.NotFound:
			// Within the lookup's lag: asked again, with backoff, and
			// once more when it has passed.
			wait = time.Until(settled)
			if bw := b.NextBackOff(); bw != backoff.Stop && bw < wait {
				wait = bw
			}
			last = fmt.Sprintf("not found before the lookup lag (%s) after the attempt's deadline passed", r.p.LookupLag)
		default:
			wait = b.NextBackOff()
			last = res.Message
		}
		if ctx.Err() != nil {
			return res, interrupted(req.Attempt, ctx.Err()), true
		}
		if wait == backoff.Stop || Sleep(cctx, wait) != nil {
			if ctx.Err() != nil {
				return res, interrupted(req.Attempt, ctx.Err()), true
			}
			return gaveUp(res, fmt.Sprintf("no confirmation within %s: %s", r.p.ConfirmTimeout, last))
		}
	}
}

func interrupted(executed int, err error) Decision {
	return Decision{Outcome: schemas.StatusUnresolved, Code: CodeInterrupted,
		Message: fmt.Sprintf("interrupted: %v", err), Attempts: executed}
}

// Sleep waits d or until ctx is done, whichever is first: the one wait of
// the connector path (Perform's backoff, a Retry-After's notBefore in
// Perform and in the system limits' Acquire), so that every wait ends
// with its command's context.
func Sleep(ctx context.Context, d time.Duration) error {
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
func safeCall(fn func(context.Context, connectors.Request) connectors.Result, ctx context.Context, req connectors.Request) (res connectors.Result) {
	defer func() {
		if p := recover(); p != nil {
			res = connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("connector panicked: %v", p)}
		}
	}()
	return fn(ctx, req)
}

func ptr[T any](v T) *T { return &v }

// answerDetail is the evidence detail of an Execute answer: the
// connector's message, and for an ambiguous answer how long the attempt
// took (a timeout reads "after 2s").
func answerDetail(res connectors.Result, took time.Duration) string {
	d := res.Message
	if AnswerOf(res.Kind) == schemas.AnswerAmbiguous {
		d = fmt.Sprintf("after %s: %s", took.Round(time.Millisecond), d)
	}
	return d
}

// Gate paces the requests to one external system: its concurrency and
// rate limits and its breaker (internal/connectors/limit). Perform takes a permit
// before each request it sends and gives it back with the answer, so a
// command waiting for the system holds nothing but its own place in line.
type Gate interface {
	// Acquire waits until notBefore (a Retry-After or backoff), then until
	// the system may take one more request, or until ctx ends.
	Acquire(ctx context.Context, notBefore time.Time) (Permit, error)
}

// Permit is one request's place at a Gate.
type Permit interface {
	// Done gives the place back with the answer the request got and how
	// long it took; res is the zero Result when no request was sent, or
	// when our own stop (ctx) cut it short: then it is no answer.
	Done(res connectors.Result, took time.Duration)
}

// Effectless is implemented by a connector whose Execute leaves nothing
// outside the process (noop without an effects file). The executor records
// no intent before its attempts: with no effect there is nothing a crash
// could double, overlap or leave ambiguous, so the final record alone keeps
// G1–G3 (DESIGN.md, "Where the intent is skipped").
type Effectless interface {
	Effectless() bool
}
