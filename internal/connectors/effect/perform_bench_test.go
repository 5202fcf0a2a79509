package effect_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/internal/connectors/limit"
	"github.com/onceflight/onceflight/schemas"
)

// answerNow is a connector that answers at once without looking at its
// context, as noop does.
type answerNow struct{}

func (answerNow) Execute(context.Context, connectors.Request) connectors.Result {
	return connectors.Result{Kind: connectors.Succeeded}
}

// answerWatching is a connector that asks for its context's Done channel,
// as every connector that waits on the network does (http).
type answerWatching struct{}

func (answerWatching) Execute(ctx context.Context, _ connectors.Request) connectors.Result {
	select {
	case <-ctx.Done():
		return connectors.Result{Kind: connectors.Ambiguous}
	default:
		return connectors.Result{Kind: connectors.Succeeded}
	}
}

// benchHooks are hooks of the executor's shape: a deadline check before
// the attempt, the evidence appended to a record.
type benchHooks struct {
	deadline time.Time
	evidence []schemas.Evidence
	call     effect.Call
}

func (h *benchHooks) BeforeAttempt(context.Context, *connectors.Request) error {
	if time.Now().After(h.deadline) {
		return &effect.StopError{Code: schemas.CodeExpired}
	}
	return nil
}

func (h *benchHooks) NotDone(context.Context, *connectors.Request, connectors.Result) {}

func (h *benchHooks) Evidence(_ context.Context, _ *connectors.Request, ev schemas.Evidence) {
	h.evidence = append(h.evidence, ev)
}

// BenchmarkPerform is one call as the executor makes it for a command
// whose connector answers at once: a partition's context, an external
// system's gate with room, the hooks. With allocations per call
// (-benchmem): the executor's per-command cost of effect.Perform.
//
//	go test ./internal/connectors/effect -run '^$' -bench Perform -benchmem
func BenchmarkPerform(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys := limit.New(limit.Config{Name: "bench", MaxConcurrent: 64})
	p := effect.Policy{}
	r := connectors.Request{Action: "a", Entity: "e", Key: "k", Attempt: 1}
	for _, c := range []struct {
		name string
		conn connectors.Connector
	}{{"options", answerNow{}}, {"options-watching", answerWatching{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h := &benchHooks{deadline: time.Now().Add(time.Minute)}
				d := effect.Perform(ctx, c.conn, r, p, effect.Options(effect.WithBeforeAttempt(h.BeforeAttempt),
					effect.WithGate(sys), effect.WithEvidence(h.Evidence)))
				if d.Outcome != schemas.StatusSucceeded {
					b.Fatal(d)
				}
			}
		})
	}
	b.Run("call", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h := &benchHooks{deadline: time.Now().Add(time.Minute)}
			h.call = effect.Call{Hooks: h, Gate: sys}
			d := effect.Perform(ctx, answerNow{}, r, p, &h.call)
			if d.Outcome != schemas.StatusSucceeded {
				b.Fatal(d)
			}
		}
	})
}
