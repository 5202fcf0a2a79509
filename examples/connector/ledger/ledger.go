// Package ledger is an example connector of your own: an in-memory ledger
// that credits an account once per idempotency key, refuses writes with a
// fencing token older than the account's last one, and can say whether a
// key was applied (Confirm). A real connector would call a service; the
// contract is the same (connectors.Connector, connectors.Confirmer), and the
// connectortest suite checks it (ledger_test.go).
package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/onceflight/onceflight/connectors"
)

// Ledger is safe for concurrent use.
type Ledger struct {
	// mu guards every field below: each Execute and Confirm takes it for
	// the whole call, so an effect and its record are one step.
	mu       sync.Mutex
	currency string
	applied  map[string]json.RawMessage // idempotency key → result
	balance  map[string]int64           // entity → balance
	tokens   map[string]int64           // entity → last fencing token
	effects  map[string]int             // key → times applied (for tests)
	// ambiguousOnce makes the next execution of a key apply and then
	// answer Ambiguous, as a timeout after the write would.
	ambiguousOnce map[string]bool
}

// New returns an empty ledger keeping amounts in currency (the action's
// `settings: {currency: EUR}`).
func New(currency string) *Ledger {
	return &Ledger{currency: currency, applied: map[string]json.RawMessage{}, balance: map[string]int64{},
		tokens: map[string]int64{}, effects: map[string]int{}, ambiguousOnce: map[string]bool{}}
}

type credit struct {
	Amount int64 `json:"amount"`
}

// Execute credits data.amount to the entity's account, once per key.
func (l *Ledger) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	if err := ctx.Err(); err != nil {
		return connectors.Result{Kind: connectors.Unavailable, Message: "not sent: " + err.Error()}
	}
	if !req.Deadline.IsZero() && !time.Now().Before(req.Deadline) {
		return connectors.Result{Kind: connectors.Unavailable, Message: "deadline passed before the write"}
	}
	var c credit
	if len(req.Data) > 0 {
		if err := json.Unmarshal(req.Data, &c); err != nil {
			return connectors.Result{Kind: connectors.Rejected, Message: fmt.Sprintf("data: %v", err)}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if req.FencingToken != 0 && req.FencingToken < l.tokens[req.Entity] {
		return connectors.Result{Kind: connectors.Rejected, Message: fmt.Sprintf("fencing token %d is older than %d", req.FencingToken, l.tokens[req.Entity])}
	}
	l.tokens[req.Entity] = max(l.tokens[req.Entity], req.FencingToken)
	if res, ok := l.applied[req.Key]; ok {
		return connectors.Result{Kind: connectors.Succeeded, Result: res}
	}
	l.balance[req.Entity] += c.Amount
	l.effects[req.Key]++
	res, _ := json.Marshal(map[string]any{"balance": l.balance[req.Entity], "currency": l.currency})
	l.applied[req.Key] = res
	if l.ambiguousOnce[req.Key] {
		delete(l.ambiguousOnce, req.Key)
		return connectors.Result{Kind: connectors.Ambiguous, Message: "write sent, answer lost"}
	}
	return connectors.Result{Kind: connectors.Succeeded, Result: res}
}

// Confirm says whether key was applied.
func (l *Ledger) Confirm(ctx context.Context, req connectors.Request) connectors.Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if res, ok := l.applied[req.Key]; ok {
		return connectors.Result{Kind: connectors.Succeeded, Result: res}
	}
	return connectors.Result{Kind: connectors.NotFound}
}

// Effects is how often key's credit was applied (tests).
func (l *Ledger) Effects(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects[key]
}

// AmbiguousOnce makes key's next execution apply and then answer
// Ambiguous (tests).
func (l *Ledger) AmbiguousOnce(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ambiguousOnce[key] = true
}
