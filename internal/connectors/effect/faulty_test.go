package effect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/onceflight/onceflight/connectors"
)

// Fault is what Faulty does on one execution instead of simply succeeding.
type Fault int

// Faults a test can inject for a key, consumed one per execution.
const (
	// FaultNone executes normally: apply, then Succeeded.
	FaultNone Fault = iota
	// FaultUnavailable answers Unavailable without applying (a 503).
	FaultUnavailable
	// FaultAmbiguousBefore answers Ambiguous without applying (a 500 before
	// the handler ran, a timeout while queued).
	FaultAmbiguousBefore
	// FaultAmbiguousAfter applies, then answers Ambiguous (a timeout or reset
	// after the external system committed): the case G3 exists for.
	FaultAmbiguousAfter
	// FaultReject answers Rejected without applying (a 422).
	FaultReject
)

// Faulty is an in-memory connector whose failures are scripted, for testing
// Perform and for checking that the conformance suite catches what it should.
// It counts effects per key the way an external system would: with
// IdempotentByKey a key is applied at most once however often it is sent.
type Faulty struct {
	// IdempotentByKey makes the fake system deduplicate the key itself.
	IdempotentByKey bool
	// NoConfirm makes CanConfirm report false (like http without confirm_url).
	NoConfirm bool
	// ConfirmUnknown is the number of Confirm calls answered Ambiguous
	// ("still unknown") before answering truthfully; -1 means forever.
	ConfirmUnknown int

	// mu guards what the fake system saw and will do: Inject, Execute,
	// Confirm and the counters take it. A leaf lock.
	mu struct {
		sync.Mutex
		faults     map[string][]Fault
		effects    map[string]int
		executions map[string]int
		deadlines  map[string][]time.Time
		confirms   int
	}
}

// NewFaulty returns a Faulty that succeeds until faults are injected.
func NewFaulty() *Faulty { return &Faulty{} }

// Inject queues faults for key's next executions, in order.
func (f *Faulty) Inject(key string, faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.faults == nil {
		f.mu.faults = map[string][]Fault{}
	}
	f.mu.faults[key] = append(f.mu.faults[key], faults...)
}

// Effects is how many times key's effect was applied.
func (f *Faulty) Effects(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.effects[key]
}

// Executions is how many executions of key reached the fake system.
func (f *Faulty) Executions(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.executions[key]
}

// Deadlines lists the deadline carried by each execution of key.
func (f *Faulty) Deadlines(key string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.mu.deadlines[key]...)
}

// Confirms is how many Confirm calls were made.
func (f *Faulty) Confirms() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.confirms
}

// Execute implements connectors.Connector.
func (f *Faulty) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	if !req.Deadline.IsZero() && !time.Now().Before(req.Deadline) {
		return connectors.Result{Kind: connectors.Unavailable, Message: "deadline passed before the request was sent"}
	}
	if err := ctx.Err(); err != nil {
		return connectors.Result{Kind: connectors.Unavailable, Message: fmt.Sprintf("not sent: %v", err)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.effects == nil {
		f.mu.effects, f.mu.executions, f.mu.deadlines = map[string]int{}, map[string]int{}, map[string][]time.Time{}
	}
	f.mu.executions[req.Key]++
	f.mu.deadlines[req.Key] = append(f.mu.deadlines[req.Key], req.Deadline)
	fault := FaultNone
	if q := f.mu.faults[req.Key]; len(q) > 0 {
		fault, f.mu.faults[req.Key] = q[0], q[1:]
	}
	apply := func() {
		if !f.IdempotentByKey || f.mu.effects[req.Key] == 0 {
			f.mu.effects[req.Key]++
		}
	}
	switch fault {
	case FaultUnavailable:
		return connectors.Result{Kind: connectors.Unavailable, Message: "injected: unavailable"}
	case FaultAmbiguousBefore:
		return connectors.Result{Kind: connectors.Ambiguous, Message: "injected: ambiguous, not applied"}
	case FaultAmbiguousAfter:
		apply()
		return connectors.Result{Kind: connectors.Ambiguous, Message: "injected: ambiguous, applied"}
	case FaultReject:
		return connectors.Result{Kind: connectors.Rejected, Message: "injected: rejected"}
	}
	apply()
	return connectors.Result{Kind: connectors.Succeeded, Result: f.result(req.Key)}
}

func (f *Faulty) result(key string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"faulty": true, "key": key})
	return b
}

// CanConfirm implements connectors.CanConfirmer.
func (f *Faulty) CanConfirm() bool { return !f.NoConfirm }

// Confirm implements connectors.Confirmer.
func (f *Faulty) Confirm(ctx context.Context, req connectors.Request) connectors.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.confirms++
	if f.ConfirmUnknown < 0 || f.mu.confirms <= f.ConfirmUnknown {
		return connectors.Result{Kind: connectors.Ambiguous, Message: "injected: confirm unknown"}
	}
	if f.mu.effects[req.Key] > 0 {
		return connectors.Result{Kind: connectors.Succeeded, Result: f.result(req.Key)}
	}
	return connectors.Result{Kind: connectors.NotFound}
}
