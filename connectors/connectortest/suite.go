// Package connectortest is a conformance suite every connector must pass, in
// the spirit of watermill's pubsub/tests: one set of cases about the contract
// of connectors.Connector and connectors.Confirmer (deadlines honoured, nothing
// sent when cancelled, results are JSON, Confirm tells found from not found),
// run against each connector with a harness that can count the effects the
// external system saw.
//
// A connector's own test runs the suite with a harness per case; this one is
// the ledger example's (examples/connector/ledger), which counts effects in
// memory and can be told to apply one and then look ambiguous:
//
//	func TestConformance(t *testing.T) {
//		connectortest.Run(t, connectortest.Features{Confirm: true, IdempotentByKey: true},
//			func(t *testing.T) connectortest.Harness {
//				l := ledger.New("EUR")
//				return connectortest.Harness{Conn: l, Effects: l.Effects, ApplyThenAmbiguous: l.AmbiguousOnce}
//			})
//	}
//
// Features says which cases apply and what they expect. Without Confirm the
// confirmation cases are skipped, and an applied-then-ambiguous execution
// must end unresolved; with it, the same execution must end succeeded after
// one attempt, found by Confirm. A connector whose system deduplicates keys
// and cannot confirm may send again, so that case is skipped for it.
package connectortest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// Features says what the connector under test can do.
type Features struct {
	Confirm         bool // Confirm answers Succeeded/NotFound truthfully
	IdempotentByKey bool // the external system deduplicates the key
}

// Harness is one connector under test and its view of the external system.
type Harness struct {
	Conn connectors.Connector
	// Effects counts how often key's effect was applied by the external system.
	Effects func(key string) int
	// ApplyThenAmbiguous, if set, makes the next execution of key apply its
	// effect and then look ambiguous to the connector (timeout, reset, 500).
	ApplyThenAmbiguous func(key string)
}

var seq atomic.Int64

// Run runs the conformance cases. newConnector is called once per case.
func Run(t *testing.T, f Features, newConnector func(t *testing.T) Harness) {
	t.Helper()
	setup := func(t *testing.T) (Harness, effect.Policy) {
		h := newConnector(t)
		p := effect.Policy{
			Timeout:        2 * time.Second,
			MaxAttempts:    3,
			ConfirmTimeout: 3 * time.Second,
			Backoff:        func() backoff.BackOff { return backoff.NewConstantBackOff(5 * time.Millisecond) },
		}
		p.IdempotentByKey = f.IdempotentByKey
		return h, p
	}

	t.Run("ExecuteSucceedsWithJSONResult", func(t *testing.T) {
		h, p := setup(t)
		req := newRequest(t)
		d := effect.Perform(context.Background(), h.Conn, req, p)
		if d.Outcome != schemas.StatusSucceeded || d.Attempts != 1 {
			t.Fatalf("decision = %+v, want succeeded after 1 attempt", d)
		}
		if !json.Valid(d.Result) || len(d.Result) == 0 {
			t.Fatalf("result %q is not JSON", d.Result)
		}
		if n := h.Effects(req.Key); n != 1 {
			t.Fatalf("effects = %d, want 1", n)
		}
	})

	t.Run("ExpiredDeadlineSendsNothing", func(t *testing.T) {
		h, _ := setup(t)
		req := newRequest(t)
		req.Deadline = time.Now().Add(-time.Millisecond)
		res := h.Conn.Execute(context.Background(), req)
		if res.Kind != connectors.Unavailable {
			t.Fatalf("Execute past deadline = %v %q, want unavailable", res.Kind, res.Message)
		}
		if n := h.Effects(req.Key); n != 0 {
			t.Fatalf("effects = %d, want 0", n)
		}
	})

	t.Run("CancelledContextSendsNothing", func(t *testing.T) {
		h, p := setup(t)
		req := newRequest(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if res := h.Conn.Execute(ctx, req); res.Kind == connectors.Succeeded {
			t.Fatalf("Execute with cancelled ctx succeeded")
		}
		d := effect.Perform(ctx, h.Conn, req, p)
		if d.Outcome != schemas.StatusUnresolved || d.Code != effect.CodeInterrupted || d.Attempts != 0 {
			t.Fatalf("decision = %+v, want unresolved interrupted, 0 attempts", d)
		}
		if n := h.Effects(req.Key); n != 0 {
			t.Fatalf("effects = %d, want 0", n)
		}
	})

	if f.Confirm {
		t.Run("ConfirmFoundAndNotFound", func(t *testing.T) {
			h, _ := setup(t)
			c, ok := effect.ConfirmerOf(h.Conn)
			if !ok {
				t.Fatal("connector does not confirm")
			}
			req := newRequest(t)
			req.Deadline = time.Now().Add(2 * time.Second)
			if res := h.Conn.Execute(context.Background(), req); res.Kind != connectors.Succeeded {
				t.Fatalf("Execute = %v %q", res.Kind, res.Message)
			}
			if res := c.Confirm(context.Background(), req); res.Kind != connectors.Succeeded || !json.Valid(res.Result) {
				t.Fatalf("Confirm after success = %v %q %s", res.Kind, res.Message, res.Result)
			}
			unknown := newRequest(t)
			if res := c.Confirm(context.Background(), unknown); res.Kind != connectors.NotFound {
				t.Fatalf("Confirm of unknown key = %v %q, want not_found", res.Kind, res.Message)
			}
		})

		t.Run("ReconcileAfterSuccessAddsNoEffect", func(t *testing.T) {
			h, p := setup(t)
			req := newRequest(t)
			d := effect.Perform(context.Background(), h.Conn, req, p)
			if d.Outcome != schemas.StatusSucceeded {
				t.Fatalf("perform = %+v", d)
			}
			req.Attempt = d.Attempts
			req.Deadline = time.Now().Add(-time.Millisecond)
			d = effect.Reconcile(context.Background(), h.Conn, req, p)
			if d.Outcome != schemas.StatusSucceeded || d.Attempts != 1 {
				t.Fatalf("reconcile = %+v, want succeeded with attempts 1", d)
			}
			if n := h.Effects(req.Key); n != 1 {
				t.Fatalf("effects = %d, want 1", n)
			}
		})

		t.Run("ReconcileNeverRunKeyExecutesOnce", func(t *testing.T) {
			h, p := setup(t)
			req := newRequest(t)
			req.Attempt = 1
			req.Deadline = time.Now().Add(-time.Millisecond)
			d := effect.Reconcile(context.Background(), h.Conn, req, p)
			if d.Outcome != schemas.StatusSucceeded || d.Attempts != 2 {
				t.Fatalf("reconcile = %+v, want succeeded as attempt 2", d)
			}
			if n := h.Effects(req.Key); n != 1 {
				t.Fatalf("effects = %d, want 1", n)
			}
		})
	}

	if f.Confirm || !f.IdempotentByKey {
		t.Run("AppliedThenAmbiguous", func(t *testing.T) {
			h, p := setup(t)
			if h.ApplyThenAmbiguous == nil {
				t.Skip("harness cannot inject an applied-then-ambiguous fault")
			}
			req := newRequest(t)
			h.ApplyThenAmbiguous(req.Key)
			d := effect.Perform(context.Background(), h.Conn, req, p)
			if f.Confirm {
				if d.Outcome != schemas.StatusSucceeded || d.Attempts != 1 {
					t.Fatalf("decision = %+v, want succeeded by confirmation after 1 attempt", d)
				}
			} else if d.Outcome != schemas.StatusUnresolved || d.Code != schemas.CodeAmbiguous {
				t.Fatalf("decision = %+v, want unresolved ambiguous_no_confirm", d)
			}
			if n := h.Effects(req.Key); n != 1 {
				t.Fatalf("effects = %d, want exactly 1", n)
			}
		})
	}
}

func newRequest(t *testing.T) connectors.Request {
	n := seq.Add(1)
	return connectors.Request{
		Action:       "test.action",
		Entity:       fmt.Sprintf("entity-%d", n),
		Key:          fmt.Sprintf("%s/key %d/é", t.Name(), n), // spaces, slashes, non-ASCII: escaping matters
		Attempt:      1,
		FencingToken: n,
		Data:         json.RawMessage(`{"amount":42}`),
		TraceParent:  "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
}
