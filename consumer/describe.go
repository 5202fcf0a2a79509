package consumer

import (
	"fmt"
	"time"

	"github.com/onceflight/onceflight/internal/connectors/effect"
)

// Protection is how the executor will perform one configured action: the
// policy and connector capabilities buildActions derives from the file. It
// exists so that `onceflight actions` and `config validate` describe what
// the executor does from the executor's own construction, not from a second
// reading of the file that could drift from it.
type Protection struct {
	// The retry and confirmation policy Perform is given, defaults applied
	// (with buildActions' adjustments, e.g. noop without an effects file is
	// idempotent by key): docs/configuration.md names each.
	Timeout, GiveUpAfter, ConfirmTimeout time.Duration
	// LookupLag: a confirmation's "not found" is trusted only this long
	// after the attempt's deadline plus --clock-drift (lookup_lag).
	LookupLag       time.Duration
	MaxAttempts     int
	IdempotentByKey bool
	// CanConfirm: the connector can confirm an earlier attempt
	// (effect.ConfirmerOf).
	CanConfirm bool
	// Effectless: the connector leaves nothing outside the process.
	Effectless bool
	// System is the external system the action's requests go through,
	// with its limits as the executor applies them.
	System SystemLimits
}

// SystemLimits are an external system's limits (limit.Config, defaults
// applied) as an action's description shows them.
type SystemLimits struct {
	Name string
	// Own: the action has no system: of its own in the file, so it is a
	// system by itself, by its name.
	Own bool
	// MaxConcurrent is the ceiling of requests in flight; 0 means serve's
	// --max-inflight.
	MaxConcurrent int
	Rate          float64 // requests per second; 0: none
	Burst         int
	BreakerAfter  int
	ProbeEvery    time.Duration
}

// Protections builds every action of c exactly as an executor would, reads
// off what Perform will be given, and releases the connectors again. It
// opens no connection: connectors dial on first use, and none is used.
// Of opts only WithConnector matters: a registered kind is built by its
// factory, as the executor would build it.
func Protections(c *Actions, opts ...Option) (map[string]Protection, error) {
	var e Executor
	for _, o := range opts {
		o(&e)
	}
	acts, err := buildActions(c, Config{Brokers: []string{"127.0.0.1:9092"}, MaxInflight: 1}, e.factories)
	if err != nil {
		return nil, fmt.Errorf("build actions: %w", err)
	}
	out := make(map[string]Protection, len(acts))
	for name, a := range acts {
		_, canConfirm := effect.ConfirmerOf(a.conn)
		lc := a.sys.Config()
		sl := SystemLimits{Name: lc.Name, Own: a.cfg.System == "", MaxConcurrent: lc.MaxConcurrent, Rate: lc.Rate,
			BreakerAfter: lc.BreakerAfter, ProbeEvery: lc.ProbeEvery}
		if a.sys.flagCeiling {
			sl.MaxConcurrent = 0
		}
		if lc.Rate > 0 {
			sl.Burst = a.sys.Burst()
		}
		out[name] = Protection{Timeout: a.policy.Timeout, GiveUpAfter: a.policy.GiveUpAfter, ConfirmTimeout: a.policy.ConfirmTimeout, LookupLag: a.policy.LookupLag,
			MaxAttempts: a.policy.MaxAttempts, IdempotentByKey: a.policy.IdempotentByKey, CanConfirm: canConfirm, Effectless: a.effectless, System: sl}
		if a.close != nil {
			a.close()
		}
	}
	return out, nil
}
