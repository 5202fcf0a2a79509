package consumer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
	kafkaconn "github.com/onceflight/onceflight/internal/connectors/kafka"
	"github.com/onceflight/onceflight/internal/connectors/limit"
	"github.com/onceflight/onceflight/internal/connectors/noop"
	"github.com/onceflight/onceflight/kafkaconf"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// action is a configured action with its connector and policy.
type action struct {
	cfg    *config.Action
	conn   connectors.Connector
	policy effect.Policy
	close  func() // releases the connector's resources, if any
	// effectless: no intent is recorded before an attempt (the connector
	// has no effect to double; effect.Effectless).
	effectless bool
	// sys is the external system the action's requests go through: its
	// limits, breaker and per-partition slots (one per system, shared by
	// the actions naming it).
	sys *system
}

// system is one external system's protection in this process: its own
// pool of requests in flight (the limit.System) and, within it, a bound
// per partition, so that one hot partition cannot take all of a system's
// slots. A system's slots are its own: a slow or unreachable system can
// fill only its own pool, never another system's (the bulkhead).
type system struct {
	*limit.System
	// flagCeiling: max_concurrent was not configured; the ceiling is
	// --max-inflight.
	flagCeiling bool
	perPart     int
	parts       sync.Map // int32 partition → chan struct{}
}

// slots is partition p's slots at the system, taken once the system
// admitted the request (effect.WithSlot).
func (s *system) slots(p int32) partSlots {
	v, ok := s.parts.Load(p)
	if !ok {
		v, _ = s.parts.LoadOrStore(p, make(partSlots, s.perPart))
	}
	return v.(partSlots)
}

// partSlots is one partition's slots at a system (effect.Slot): a
// channel, so that it is an effect.Slot without a heap object per
// request.
type partSlots chan struct{}

// Take takes a slot, or waits for one until ctx ends. A free slot is
// taken without asking ctx for its Done channel (which would make the
// admission's deadline context, effect's deadlineCtx).
func (s partSlots) Take(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // never a slot once the admission's bound passed
	}
	select {
	case s <- struct{}{}:
		return nil
	default:
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Give gives a slot back.
func (s partSlots) Give() { <-s }

// notDoneRecord is the in_progress record written after attempt r was
// answered "not done" (effect.WithNotDone): the attempt is over and
// took no effect, and the command waits for the external system. Its error
// is that answer (code connector_unavailable), which tells a new owner to
// execute again rather than confirm (decide.Inheriting) and tells an operator
// looking at an in_progress record what it waits for.
func notDoneRecord(rec schemas.Record, r *connectors.Request, res connectors.Result) schemas.Record {
	in := rec
	in.Status = schemas.StatusInProgress
	in.Attempts = r.Attempt
	d := r.Deadline.UTC()
	in.Deadline = &d
	in.Result, in.FinishedAt = nil, nil
	in.Error = &schemas.Error{Code: schemas.CodeConnectorUnavailable, Message: "waiting for the external system; last answer: " + res.Message}
	return in
}

// buildSystems builds the systems of the file's `systems:` section; an
// action without one gets a system of its own in buildActions.
func buildSystems(c *config.Config, cfg Config) map[string]*system {
	out := map[string]*system{}
	for name, s := range c.Systems {
		out[name] = newSystem(cfg, limit.Config{Name: name, MaxConcurrent: s.MaxConcurrent, Rate: s.Rate, Burst: s.Burst,
			BreakerAfter: s.BreakerAfter, ProbeEvery: s.ProbeEvery})
	}
	return out
}

func newSystem(cfg Config, lc limit.Config) *system {
	s := &system{flagCeiling: lc.MaxConcurrent == 0, perPart: max(1, cfg.MaxInflightPerPartition)}
	if s.flagCeiling {
		lc.MaxConcurrent = cfg.MaxInflight
	}
	if cfg.MaxInflightPerPartition == 0 {
		s.perPart = max(1, lc.MaxConcurrent)
	}
	lc.Logger = cfg.Logger
	// While the system is down, a quarter of --max-buffered at most (and
	// no more than it takes requests at once) waits for it; the rest
	// steps aside (park.go).
	lc.KeepWaiting = max(1, min(lc.MaxConcurrent, cfg.MaxBuffered/4))
	s.System = limit.New(lc)
	return s
}

// systemStats is every external system's state, for metrics.
func (e *Executor) systemStats() []limit.Stats {
	var out []limit.Stats
	for _, s := range e.systems() {
		out = append(out, s.Stats())
	}
	return out
}

// systems lists the executor's external systems, once each.
func (e *Executor) systems() []*system {
	seen := map[*system]bool{}
	var out []*system
	for _, a := range e.actions {
		if a.sys != nil && !seen[a.sys] {
			seen[a.sys] = true
			out = append(out, a.sys)
		}
	}
	return out
}

// retention is how long results and keys are remembered (docs/events.md#execution-records).
type retention struct {
	keep, memory time.Duration
}

func buildActions(c *config.Config, cfg Config, factories map[string]ConnectorFactory) (map[string]*action, error) {
	out := map[string]*action{}
	if c == nil {
		return out, nil
	}
	systems := buildSystems(c, cfg)
	for name, a := range c.Actions {
		p := effect.Policy{
			Timeout:         a.Timeout,
			MaxAttempts:     a.MaxAttempts,
			ConfirmTimeout:  a.ConfirmTimeout,
			IdempotentByKey: a.IdempotentByKey,
			GiveUpAfter:     a.GiveUpAfter,
			ClockDrift:      cfg.ClockDrift,
			LookupLag:       a.LookupLag,
		}
		sys := systems[a.System]
		if a.System == "" {
			sys = newSystem(cfg, limit.Config{Name: name})
		}
		var conn connectors.Connector
		switch a.Connector {
		case config.ConnectorNoop:
			var opts []noop.Option
			if a.EffectsFile != "" {
				opts = append(opts, noop.WithEffectsFile(a.EffectsFile))
			} else {
				// Without an effects file there is no effect at all, so
				// executing again is harmless.
				p.IdempotentByKey = true
			}
			conn = noop.New(opts...)
		case config.ConnectorHTTP:
			var tr httpconn.Transport
			if s := c.Systems[a.System]; s != nil {
				tr = s.HTTP
			}
			h, err := httpconn.New(httpconn.Config{URL: a.URL, ConfirmURL: a.ConfirmURL, Timeout: a.Timeout, MaxConcurrent: sys.Config().MaxConcurrent, Transport: tr, API: a.API})
			if err != nil {
				return nil, fmt.Errorf("action %q: %w", name, err)
			}
			conn = h
		case config.ConnectorKafka:
			// The effect's producer is separate from the executor's
			// transactional one: the effect must not be undone when a
			// transaction aborts. Its delivery timeout is the attempt timeout,
			// so a record reported ambiguous is not delivered later.
			brokers, connOpts := cfg.Brokers, cfg.KafkaOpts
			if a.OwnConnection() {
				connOpts = a.Kafka.Opts()
				if len(a.Brokers) > 0 {
					brokers = a.Brokers
				}
			}
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0),
				kafkaconf.WireCompression(),
				kgo.RecordDeliveryTimeout(p.Timeout)}, connOpts...)...)
			if err != nil {
				return nil, fmt.Errorf("action %q: kafka client: %w", name, err)
			}
			k, err := kafkaconn.New(kafkaconn.Config{Client: cl, Topic: a.Topic, PartitionFor: partitioner.ForEntity, ConfirmOpts: connOpts,
				ClockDrift: cfg.ClockDrift})
			if err != nil {
				return nil, fmt.Errorf("action %q: %w", name, err)
			}
			conn = k
			out[name] = &action{cfg: a, conn: conn, policy: p, close: cl.Close, sys: sys}
			continue
		default:
			f, ok := factories[a.Connector]
			if !ok {
				return nil, fmt.Errorf("action %q: connector %q is not available in this build (register it with consumer.WithConnector)", name, a.Connector)
			}
			k, err := f(a)
			if err != nil {
				return nil, fmt.Errorf("action %q: connector %q: %w", name, a.Connector, err)
			}
			if k == nil {
				return nil, fmt.Errorf("action %q: connector %q: the factory returned no connector", name, a.Connector)
			}
			conn = k
		}
		el, _ := conn.(effect.Effectless)
		out[name] = &action{cfg: a, conn: conn, policy: p, effectless: el != nil && el.Effectless(), sys: sys}
	}
	return out, nil
}
