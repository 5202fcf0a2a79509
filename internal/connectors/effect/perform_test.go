package effect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

func fastPolicy() effect.Policy {
	return effect.Policy{
		Timeout:        200 * time.Millisecond,
		MaxAttempts:    3,
		ConfirmTimeout: time.Second, // a confirmation waits out the attempt's 200ms deadline first: room for a loaded machine
		Backoff:        func() backoff.BackOff { return backoff.NewConstantBackOff(2 * time.Millisecond) },
	}
}

func req(key string) connectors.Request {
	return connectors.Request{Action: "a", Entity: "e", Key: key, Attempt: 1}
}

// notDoneForever is more "not done" answers than any give_up_after of the
// tests lets through.
var notDoneForever = func() []Fault {
	fs := make([]Fault, 10000)
	for i := range fs {
		fs[i] = FaultUnavailable
	}
	return fs
}()

func TestPerformRules(t *testing.T) {
	type want struct {
		outcome    schemas.Status
		code       string
		attempts   int
		effects    int
		executions int
	}
	for _, tc := range []struct {
		name   string
		faulty *Faulty
		faults []Fault
		idem   bool
		want   want
	}{
		{"succeeds", &Faulty{}, nil, false, want{schemas.StatusSucceeded, "", 1, 1, 1}},
		{"rejected not retried", &Faulty{}, []Fault{FaultReject}, false, want{schemas.StatusFailed, schemas.CodeConnectorRejected, 1, 0, 1}},
		{"unavailable then ok", &Faulty{}, []Fault{FaultUnavailable, FaultUnavailable}, false, want{schemas.StatusSucceeded, "", 3, 1, 3}},
		{"not done uses up no attempt", &Faulty{}, []Fault{FaultUnavailable, FaultUnavailable, FaultUnavailable}, false, want{schemas.StatusSucceeded, "", 4, 1, 4}},
		{"ambiguous applied, confirm found", &Faulty{}, []Fault{FaultAmbiguousAfter}, false, want{schemas.StatusSucceeded, "", 1, 1, 1}},
		{"ambiguous not applied, confirm not found, re-executed", &Faulty{}, []Fault{FaultAmbiguousBefore}, false, want{schemas.StatusSucceeded, "", 2, 1, 2}},
		{"confirm flaps then found", &Faulty{ConfirmUnknown: 2}, []Fault{FaultAmbiguousAfter}, false, want{schemas.StatusSucceeded, "", 1, 1, 1}},
		{"confirm never answers", &Faulty{ConfirmUnknown: -1}, []Fault{FaultAmbiguousAfter}, false, want{schemas.StatusUnresolved, schemas.CodeConfirmationTimeout, 1, 1, 1}},
		{"no confirm, not idempotent", &Faulty{NoConfirm: true}, []Fault{FaultAmbiguousAfter}, false, want{schemas.StatusUnresolved, schemas.CodeAmbiguous, 1, 1, 1}},
		{"no confirm, idempotent", &Faulty{NoConfirm: true, IdempotentByKey: true}, []Fault{FaultAmbiguousAfter}, true, want{schemas.StatusSucceeded, "", 2, 1, 2}},
		{"idempotent: ambiguous then not done until the end stays unresolved", &Faulty{NoConfirm: true, IdempotentByKey: true},
			append([]Fault{FaultAmbiguousAfter}, notDoneForever...), true, want{schemas.StatusUnresolved, schemas.CodeAmbiguous, -1, 1, -1}},
		{"not done until give_up_after", &Faulty{}, notDoneForever, false, want{schemas.StatusFailed, schemas.CodeConnectorUnavailable, -1, 0, -1}},
		{"idempotent: ambiguous then rejected stays unresolved", &Faulty{NoConfirm: true, IdempotentByKey: true},
			[]Fault{FaultAmbiguousAfter, FaultReject}, true, want{schemas.StatusUnresolved, schemas.CodeAmbiguous, 2, 1, 2}},
		{"not found counts toward max attempts", &Faulty{}, []Fault{FaultAmbiguousBefore, FaultAmbiguousBefore, FaultAmbiguousBefore}, false,
			want{schemas.StatusFailed, schemas.CodeConnectorUnavailable, 3, 0, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.faulty
			f.Inject("k", tc.faults...)
			p := fastPolicy()
			p.IdempotentByKey = tc.idem
			p.GiveUpAfter = 50 * time.Millisecond
			d := effect.Perform(context.Background(), f, req("k"), p)
			got := want{d.Outcome, d.Code, d.Attempts, f.Effects("k"), f.Executions("k")}
			if tc.want.attempts < 0 {
				// Given up by time: how many attempts fit is the
				// scheduler's; that there were several, and that the
				// record says how often it waited, is the rule.
				if got.attempts < 3 || got.executions != got.attempts || !strings.Contains(d.Message, "waited") || !strings.Contains(d.Message, "last answer") {
					t.Fatalf("got %+v (message %q), want several attempts and the waits named", got, d.Message)
				}
				got.attempts, got.executions = -1, -1
			}
			if got != tc.want {
				t.Fatalf("got %+v (message %q), want %+v", got, d.Message, tc.want)
			}
			if d.Outcome == schemas.StatusSucceeded && len(d.Result) == 0 {
				t.Fatal("succeeded without a result")
			}
		})
	}
}

func TestPerformDeadlinePerAttemptAndHook(t *testing.T) {
	f := NewFaulty()
	f.Inject("k", FaultUnavailable)
	var hooked []int
	var hookDeadlines []time.Time
	r := req("k")
	r.Attempt = 4 // two earlier attempts happened under another owner
	p := fastPolicy()
	p.MaxAttempts = 5
	d := effect.Perform(context.Background(), f, r, p, effect.WithBeforeAttempt(func(_ context.Context, r *connectors.Request) error {
		hooked = append(hooked, r.Attempt)
		hookDeadlines = append(hookDeadlines, r.Deadline)
		return nil
	}))
	if d.Outcome != schemas.StatusSucceeded || d.Attempts != 5 {
		t.Fatalf("decision %+v", d)
	}
	dls := f.Deadlines("k")
	if len(hooked) != 2 || hooked[0] != 4 || hooked[1] != 5 || len(dls) != 2 {
		t.Fatalf("hook saw %v, executions saw %v", hooked, dls)
	}
	for i := range dls {
		if !dls[i].Equal(hookDeadlines[i]) {
			t.Fatalf("attempt %d: executed with deadline %v, hook recorded %v", i, dls[i], hookDeadlines[i])
		}
	}
	if !dls[1].After(dls[0]) {
		t.Fatal("retry reused the first attempt's deadline")
	}
}

func TestPerformHookErrorSendsNothing(t *testing.T) {
	f := NewFaulty()
	d := effect.Perform(context.Background(), f, req("k"), fastPolicy(), effect.WithBeforeAttempt(func(context.Context, *connectors.Request) error {
		return errors.New("journal down")
	}))
	if d.Outcome != schemas.StatusUnresolved || d.Code != effect.CodeNotStarted || d.Attempts != 0 || f.Executions("k") != 0 {
		t.Fatalf("decision %+v, executions %d", d, f.Executions("k"))
	}
}

func TestPerformInterruptedDuringBackoff(t *testing.T) {
	f := NewFaulty()
	f.Inject("k", FaultUnavailable, FaultUnavailable)
	p := fastPolicy()
	p.Backoff = func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	d := effect.Perform(ctx, f, req("k"), p)
	if d.Outcome != schemas.StatusUnresolved || d.Code != effect.CodeInterrupted || d.Attempts != 1 {
		t.Fatalf("decision %+v", d)
	}
}

func TestConfirmWaitsForDeadlineBeforeTrustingNotFound(t *testing.T) {
	// The attempt is ambiguous and, unknown to us, still in flight: it lands
	// after the first confirmation answered NotFound and before the
	// attempt's deadline. That early NotFound must not trigger a second
	// execution. The effect lands inside the first Confirm call, not after a
	// timer, so a loaded machine cannot move it past the deadline; the
	// deadline is long enough for that first call to come before it.
	f := NewFaulty()
	f.Inject("k", FaultAmbiguousBefore)
	p := fastPolicy()
	p.Timeout = time.Second
	p.ConfirmTimeout = 5 * time.Second
	late := &lateApplier{Faulty: f}
	d := effect.Perform(context.Background(), late, req("k"), p)
	if d.Outcome != schemas.StatusSucceeded || d.Attempts != 1 || f.Effects("k") != 1 {
		t.Fatalf("decision %+v, effects %d", d, f.Effects("k"))
	}
	if !late.landed {
		t.Fatal("the late effect never landed: the test did not exercise an early NotFound")
	}
}

// lateApplier answers the first execution Ambiguous at once and applies it
// only once a confirmation has answered NotFound, like a request still
// queued behind a proxy that gave up.
type lateApplier struct {
	*Faulty
	pending *connectors.Request
	landed  bool
}

func (l *lateApplier) Execute(ctx context.Context, r connectors.Request) connectors.Result {
	res := l.Faulty.Execute(ctx, r)
	if l.pending == nil && !l.landed && res.Kind == connectors.Ambiguous {
		l.pending = &r
	}
	return res
}

func (l *lateApplier) Confirm(ctx context.Context, r connectors.Request) connectors.Result {
	res := l.Faulty.Confirm(ctx, r)
	if l.pending != nil && res.Kind == connectors.NotFound {
		l.Faulty.Execute(context.Background(), *l.pending)
		l.pending, l.landed = nil, true
	}
	return res
}

func TestReconcile(t *testing.T) {
	past := time.Now().Add(-time.Second)
	t.Run("confirmed succeeded, no execution", func(t *testing.T) {
		f := NewFaulty()
		f.Execute(context.Background(), req("k"))
		r := req("k")
		r.Attempt, r.Deadline = 2, past
		d := effect.Reconcile(context.Background(), f, r, fastPolicy())
		if d.Outcome != schemas.StatusSucceeded || d.Attempts != 2 || f.Executions("k") != 1 {
			t.Fatalf("decision %+v executions %d", d, f.Executions("k"))
		}
	})
	t.Run("not found, executes as next attempt", func(t *testing.T) {
		f := NewFaulty()
		r := req("k")
		r.Attempt, r.Deadline = 2, past
		d := effect.Reconcile(context.Background(), f, r, fastPolicy())
		if d.Outcome != schemas.StatusSucceeded || d.Attempts != 3 || f.Effects("k") != 1 {
			t.Fatalf("decision %+v effects %d", d, f.Effects("k"))
		}
	})
	t.Run("no confirmer", func(t *testing.T) {
		f := &Faulty{NoConfirm: true}
		r := req("k")
		r.Deadline = past
		d := effect.Reconcile(context.Background(), f, r, fastPolicy())
		if d.Outcome != schemas.StatusUnresolved || d.Code != schemas.CodeAmbiguous || f.Executions("k") != 0 {
			t.Fatalf("decision %+v", d)
		}
	})
	t.Run("no confirmer, idempotent", func(t *testing.T) {
		f := &Faulty{NoConfirm: true, IdempotentByKey: true}
		r := req("k")
		r.Deadline = past
		p := fastPolicy()
		p.IdempotentByKey = true
		d := effect.Reconcile(context.Background(), f, r, p)
		if d.Outcome != schemas.StatusSucceeded || d.Attempts != 2 || f.Executions("k") != 1 {
			t.Fatalf("decision %+v", d)
		}
	})
	t.Run("confirm never answers", func(t *testing.T) {
		f := &Faulty{ConfirmUnknown: -1}
		r := req("k")
		r.Deadline = past
		d := effect.Reconcile(context.Background(), f, r, fastPolicy())
		if d.Outcome != schemas.StatusUnresolved || d.Code != schemas.CodeConfirmationTimeout || f.Executions("k") != 0 {
			t.Fatalf("decision %+v", d)
		}
	})
}

type panicky struct{ confirm bool }

func (p panicky) Execute(context.Context, connectors.Request) connectors.Result { panic("boom") }
func (p panicky) Confirm(context.Context, connectors.Request) connectors.Result {
	if p.confirm {
		panic("confirm boom")
	}
	return connectors.Result{Kind: connectors.Succeeded, Result: []byte(`{}`)}
}

// A connector that panics neither crashes the executor nor gets a blind
// retry: its attempt is ambiguous and goes to confirmation.
func TestPanickingConnectorIsAmbiguous(t *testing.T) {
	p := effect.Policy{Timeout: 50 * time.Millisecond, ConfirmTimeout: 100 * time.Millisecond}
	if d := effect.Perform(context.Background(), panicky{}, connectors.Request{Key: "k"}, p); d.Outcome != schemas.StatusSucceeded || d.Attempts != 1 {
		t.Fatalf("confirmed after panic: %+v", d)
	}
	if d := effect.Perform(context.Background(), panicky{confirm: true}, connectors.Request{Key: "k"}, p); d.Outcome != schemas.StatusUnresolved || d.Code != schemas.CodeConfirmationTimeout {
		t.Fatalf("panicking confirm: %+v", d)
	}
}

// A hook that used up more than half of the attempt's time (a slow intent
// commit) is called again with a fresh deadline, and the attempt leaves
// with the deadline the hook recorded last; each call may set its own
// fencing token.
func TestBeforeAttemptRetakesAUsedUpDeadline(t *testing.T) {
	f := NewFaulty()
	p := fastPolicy()
	var calls []time.Time
	var token int64
	d := effect.Perform(context.Background(), f, req("k"), p, effect.WithBeforeAttempt(func(_ context.Context, r *connectors.Request) error {
		calls = append(calls, r.Deadline)
		token++
		r.FencingToken = token
		if len(calls) == 1 {
			time.Sleep(time.Until(r.Deadline) - p.Timeout/4) // the commit stalls
		}
		return nil
	}))
	if d.Outcome != schemas.StatusSucceeded || len(calls) != 2 {
		t.Fatalf("decision %+v after %d hook calls", d, len(calls))
	}
	dls := f.Deadlines("k")
	// Sent with at most the recorded deadline (the one a new owner waits for).
	if len(dls) != 1 || dls[0].After(calls[1]) || !calls[1].After(calls[0]) {
		t.Fatalf("executed with %v, hook recorded %v", dls, calls)
	}
}

// A hook that always takes longer than the timeout (intents committed over
// a slow link): the second try's deadline has room for the hook's time, so
// the attempt is sent — with a full timeout at most, and never past what
// the hook recorded — instead of no attempt ever leaving.
func TestBeforeAttemptSlowerThanTheTimeout(t *testing.T) {
	f := NewFaulty()
	p := fastPolicy()
	var recorded []time.Time
	d := effect.Perform(context.Background(), f, req("k"), p, effect.WithBeforeAttempt(func(_ context.Context, r *connectors.Request) error {
		recorded = append(recorded, r.Deadline)
		time.Sleep(p.Timeout + p.Timeout/2)
		return nil
	}))
	if d.Outcome != schemas.StatusSucceeded || f.Executions("k") != 1 {
		t.Fatalf("decision %+v, executions %d, hook calls %d", d, f.Executions("k"), len(recorded))
	}
	dls := f.Deadlines("k")
	last := recorded[len(recorded)-1]
	if len(recorded) != 2 || dls[0].After(last) || time.Until(dls[0]) > p.Timeout {
		t.Fatalf("sent with deadline %v; hook recorded %v", dls, recorded)
	}
}

// A StopError from the hook ends the call without sending: failed with its
// code when nothing may have happened.
func TestBeforeAttemptStop(t *testing.T) {
	f := NewFaulty()
	d := effect.Perform(context.Background(), f, req("k"), fastPolicy(), effect.WithBeforeAttempt(func(context.Context, *connectors.Request) error {
		return &effect.StopError{Code: "expired", Message: "deadline passed"}
	}))
	if d.Outcome != schemas.StatusFailed || d.Code != "expired" || f.Executions("k") != 0 {
		t.Fatalf("decision %+v, executions %d", d, f.Executions("k"))
	}
}
