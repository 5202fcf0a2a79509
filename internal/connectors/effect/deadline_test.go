package effect

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/schemas"
)

// TestDeadlineCtx: the lazily made deadline context behaves as
// context.WithDeadline whether or not anyone asked for Done: Err, Done,
// Deadline and context.Cause agree, before and after the deadline, on
// the parent's cancellation and after cancel.
func TestDeadlineCtx(t *testing.T) {
	t.Run("live", func(t *testing.T) {
		d := time.Now().Add(time.Hour)
		c := newBounds(context.Background(), d).attemptBy(d)
		if dl, ok := c.Deadline(); !ok || !dl.Equal(d) {
			t.Fatalf("deadline %v %v", dl, ok)
		}
		if c.Err() != nil || context.Cause(c) != nil {
			t.Fatalf("live context: err %v, cause %v", c.Err(), context.Cause(c))
		}
		if c.made.Load() {
			t.Fatal("Err made the underlying context while live")
		}
		select {
		case <-c.Done():
			t.Fatal("done while live")
		default:
		}
		c.cancel()
		<-c.Done()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("after cancel: %v", c.Err())
		}
	})
	t.Run("passed, Done never asked", func(t *testing.T) {
		c := newBounds(context.Background(), time.Now().Add(-time.Millisecond))
		w := &c.admit
		if !errors.Is(w.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(w), context.DeadlineExceeded) {
			t.Fatalf("err %v, cause %v", w.Err(), context.Cause(w))
		}
		<-w.Done() // closed: the underlying context was made expired
		w.cancel()
		if !errors.Is(w.Err(), context.DeadlineExceeded) {
			t.Fatalf("err changed by cancel: %v", w.Err())
		}
	})
	t.Run("passes while waited on", func(t *testing.T) {
		c := &newBounds(context.Background(), time.Now().Add(20*time.Millisecond)).admit
		<-c.Done()
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("err %v", c.Err())
		}
		c.cancel()
	})
	t.Run("parent", func(t *testing.T) {
		cause := errors.New("partition lost")
		parent, stop := context.WithCancelCause(context.Background())
		c := newBounds(parent, time.Now().Add(time.Hour)).attemptBy(time.Now().Add(time.Hour))
		stop(cause)
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), cause) {
			t.Fatalf("err %v, cause %v", c.Err(), context.Cause(c))
		}
		<-c.Done()
		c.cancel()
	})
	t.Run("parent's deadline first", func(t *testing.T) {
		pd := time.Now().Add(time.Minute)
		parent, stop := context.WithDeadline(context.Background(), pd)
		defer stop()
		c := &newBounds(parent, time.Now().Add(time.Hour)).admit
		if dl, _ := c.Deadline(); !dl.Equal(pd) {
			t.Fatalf("deadline %v, want the parent's %v", dl, pd)
		}
		c.cancel()
	})
	t.Run("Done after cancel", func(t *testing.T) {
		c := &newBounds(context.Background(), time.Now().Add(time.Hour)).admit
		c.cancel()
		<-c.Done() // a connector that kept ctx sees it ended
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("err %v", c.Err())
		}
	})
	t.Run("child", func(t *testing.T) {
		c := &newBounds(context.Background(), time.Now().Add(time.Hour)).admit
		child, stop := context.WithCancel(c)
		defer stop()
		c.cancel()
		<-child.Done()
	})
}

// TestAttemptOffersItsCancellation: the context an attempt's Execute gets
// names Perform's own context as its Cancellation, and a connector that
// waits on that alone leaves the deadline's context and timer unmade.
func TestAttemptOffersItsCancellation(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got context.Context
	var attempt *deadlineCtx
	conn := connectorFunc(func(ctx context.Context, _ connectors.Request) connectors.Result {
		c, ok := ctx.(interface{ Cancellation() context.Context })
		if !ok {
			t.Fatalf("attempt context %T names no Cancellation", ctx)
		}
		got, attempt = c.Cancellation(), ctx.(*deadlineCtx)
		return connectors.Result{Kind: connectors.Succeeded}
	})
	if d := Perform(parent, conn, connectors.Request{Key: "k"}, Policy{}); d.Outcome != schemas.StatusSucceeded {
		t.Fatalf("decision %+v", d)
	}
	if got != parent {
		t.Fatalf("Cancellation %v, want Perform's context", got)
	}
	if attempt.made.Load() {
		t.Fatal("the attempt's deadline context was made though nobody asked for Done")
	}
}

// connectorFunc is a connector whose Execute is the function.
type connectorFunc func(ctx context.Context, req connectors.Request) connectors.Result

func (f connectorFunc) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	return f(ctx, req)
}
