package effect

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineCtx is context.WithDeadline(parent, d) made when first needed.
// Perform bounds every admission (the waits, by GiveUpAfter or the
// command's deadline) and every attempt (by its Timeout) with a deadline,
// but most of them end before anyone waits on the context: the Gate and
// the slot have room, and a connector such as noop answers without
// selecting on Done. A context.WithDeadline per bound cost a timer, a
// child entry in the partition's context and their removal, twice per
// attempt (~8 heap objects and a timer-heap insert and delete per
// command). This one costs one small object until Done is asked for;
// then it is exactly context.WithDeadline(parent, d).
//
// It keeps the context contract: Deadline is the earlier of parent's and
// d; Err is nil while parent is live and d is ahead, and once non-nil
// it is the underlying context's (which is then made, so that Done, Err
// and context.Cause agree from then on); Done is the same channel on
// every call and is closed when parent ends or d passes.
type deadlineCtx struct {
	parent context.Context
	d      time.Time

	// inner is context.WithDeadline(parent, d) once made (and stop its
	// CancelFunc): set under mu, then made is set; read without a lock
	// once made says so (a connector such as http asks for Done and Value
	// many times per request).
	inner     context.Context
	stop      context.CancelFunc
	made      atomic.Bool
	mu        sync.Mutex
	cancelled bool // cancel was called: a context made later is made cancelled
}

// madeCtx returns the underlying context if it was made, else nil.
func (c *deadlineCtx) madeCtx() context.Context {
	if c.made.Load() {
		return c.inner
	}
	return nil
}

// bounds are one attempt's two deadline contexts, its admission's and
// its own, in one heap object.
type bounds struct{ admit, attempt deadlineCtx }

// newBounds bounds an attempt's admission by until.
func newBounds(parent context.Context, until time.Time) *bounds {
	b := &bounds{}
	b.admit.parent, b.admit.d = parent, until
	return b
}

// attemptBy bounds the attempt itself by d (under the same parent).
func (b *bounds) attemptBy(d time.Time) *deadlineCtx {
	b.attempt.parent, b.attempt.d = b.admit.parent, d
	return &b.attempt
}

// make returns the underlying context, creating it the first time.
func (c *deadlineCtx) make() context.Context {
	if in := c.madeCtx(); in != nil {
		return in
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made.Load() {
		return c.inner
	}
	c.inner, c.stop = context.WithDeadline(c.parent, c.d)
	if c.cancelled {
		c.stop()
	}
	c.made.Store(true)
	return c.inner
}

// Deadline is the earlier of the parent's deadline and d, as
// context.WithDeadline's.
func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if pd, ok := c.parent.Deadline(); ok && pd.Before(c.d) {
		return pd, true
	}
	return c.d, true
}

// Cancellation is the context whose end, short of d, ends this one while
// the call it was given to runs: the parent. A connector that holds the
// deadline itself (a connection's read and write deadline, from Deadline)
// waits on it for the rest — a shutdown, a lost partition — without making
// the underlying context and its timer, which asking this one for Done
// makes. cancel, Perform's own end of the attempt, comes only once the
// call returned.
func (c *deadlineCtx) Cancellation() context.Context { return c.parent }

// Done makes the underlying context: whoever waits needs its channel.
func (c *deadlineCtx) Done() <-chan struct{} { return c.make().Done() }

// Err is nil, without making anything, while the parent is live, d is
// ahead and cancel was not called; otherwise it is the underlying
// context's, so that it agrees with Done and never changes once set.
func (c *deadlineCtx) Err() error {
	if in := c.madeCtx(); in != nil {
		return in.Err()
	}
	c.mu.Lock()
	cancelled := c.cancelled
	c.mu.Unlock()
	if !cancelled && c.parent.Err() == nil && time.Now().Before(c.d) {
		return nil
	}
	return c.make().Err()
}

// Value is the parent's until the underlying context is made, then its
// (context.Cause finds a context's cancellation through Value; Err makes
// the underlying context before it reports one).
func (c *deadlineCtx) Value(key any) any {
	if in := c.madeCtx(); in != nil {
		return in.Value(key)
	}
	return c.parent.Value(key)
}

// cancel is the CancelFunc: called once the bounded work returned, it
// releases the underlying context if one was made, and a context made
// after it (by a connector that kept ctx) is cancelled already.
func (c *deadlineCtx) cancel() {
	c.mu.Lock()
	c.cancelled = true
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}
