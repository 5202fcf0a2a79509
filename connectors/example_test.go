package connectors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/onceflight/onceflight/connectors"
)

// ledger stands for an external system that keeps the idempotency keys it
// has applied, so a connector for it can both perform and confirm.
type ledger struct {
	mu      sync.Mutex
	applied map[string]json.RawMessage
}

// ledgerConnector reports what the ledger answered; deciding whether to
// retry, confirm or give up is the executor's part, not the connector's.
type ledgerConnector struct{ l *ledger }

// A connector that can confirm lets the executor settle a timed-out attempt
// by asking instead of recording it unresolved.
var _ connectors.Confirmer = ledgerConnector{}

func (c ledgerConnector) Execute(_ context.Context, req connectors.Request) connectors.Result {
	// Nothing may leave the process after the deadline: a new owner relies
	// on it to know this one has stopped.
	if !req.Deadline.IsZero() && time.Now().After(req.Deadline) {
		return connectors.Result{Kind: connectors.Unavailable, Message: "deadline passed before sending"}
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if res, ok := c.l.applied[req.Key]; ok {
		return connectors.Result{Kind: connectors.Succeeded, Result: res}
	}
	res := json.RawMessage(fmt.Sprintf(`{"entry":%d}`, len(c.l.applied)+1))
	c.l.applied[req.Key] = res
	return connectors.Result{Kind: connectors.Succeeded, Result: res}
}

func (c ledgerConnector) Confirm(_ context.Context, req connectors.Request) connectors.Result {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if res, ok := c.l.applied[req.Key]; ok {
		return connectors.Result{Kind: connectors.Succeeded, Result: res}
	}
	return connectors.Result{Kind: connectors.NotFound}
}

// A connector for a system that remembers idempotency keys: Execute performs
// the effect, Confirm answers "did key K take effect?". Register it with
// cli.WithConnector and check it with connectortest.Run.
func Example() {
	c := ledgerConnector{l: &ledger{applied: map[string]json.RawMessage{}}}
	ctx := context.Background()
	req := connectors.Request{
		Action:   "refund",
		Entity:   "order-42",
		Key:      "refund-42",
		Attempt:  1,
		Deadline: time.Now().Add(time.Minute),
		Data:     json.RawMessage(`{"amount":1250}`),
	}

	before := c.Confirm(ctx, req)
	fmt.Println("confirm before:", before.Kind)
	res := c.Execute(ctx, req)
	fmt.Println("execute:", res.Kind, string(res.Result))
	after := c.Confirm(ctx, req)
	fmt.Println("confirm after:", after.Kind, string(after.Result))
	// Output:
	// confirm before: not_found
	// execute: succeeded {"entry":1}
	// confirm after: succeeded {"entry":1}
}
