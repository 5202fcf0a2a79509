package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/internal/decide"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// reconcileOnce (run every `reconcile.every`) asks that each unresolved
// record of an owned partition be confirmed again, for `reconcile.for`
// after it became unresolved. It does not confirm by itself: it publishes a
// onceflight.reconcile control command to the entity's partition, so the
// confirmation runs in the entity's single flight, under the owner's fence,
// and its result is journaled and published like any other.
func (e *Executor) reconcileOnce(ctx context.Context) {
	owned := e.Owned()
	if len(owned) == 0 {
		return
	}
	recs, err := e.store.Unresolved(owned, 10000)
	if err != nil {
		e.log.Warn("reconciler: list unresolved", "err", err)
		return
	}
	// No record may stay in progress past its deadline without someone
	// confirming it: one whose deadline (plus drift and a grace for the
	// owner's own confirmation) has passed gets a reconcile request
	// too, which inherits it in the entity's single flight (decide.Due).
	stale, err := e.store.ByStatus(schemas.StatusInProgress, 10000)
	if err != nil {
		e.log.Warn("reconciler: list in progress", "err", err)
	}
	ownedSet := map[int32]bool{}
	for _, p := range owned {
		ownedSet[p] = true
	}
	now := time.Now()
	for _, rec := range append(recs, stale...) {
		grace := e.cfg.ClockDrift + e.reconcile.every
		if a := e.actions[rec.Action]; a != nil {
			grace += a.policy.ConfirmTimeout + a.policy.LookupLag
		}
		if decide.Due(rec, ownedSet[rec.Command.Partition], now, grace, e.reconcile.window).Verdict != decide.Request {
			continue
		}
		if err := e.requestReconcile(ctx, rec); err != nil {
			e.log.Warn("reconciler: request", "key", rec.IdempotencyKey, "err", err)
		}
	}
}

// reconcilerSource is the source of the reconciler's own reconcile
// requests (decide.ReconcilerSource).
const reconcilerSource = decide.ReconcilerSource

func (e *Executor) requestReconcile(ctx context.Context, rec schemas.Record) error {
	id := fmt.Sprintf("reconcile-%s-%d", e.cfg.ExecutorID, time.Now().UnixNano())
	data, _ := json.Marshal(map[string]string{"key": rec.IdempotencyKey})
	r, err := schemas.EncodeCommand(schemas.Command{
		ID: id, Source: reconcilerSource, Type: schemas.TypeReconcile, Subject: rec.Entity,
		IdempotencyKey: "reconcile/" + id, Data: data,
	}, schemas.Binary)
	if err != nil {
		return err
	}
	r.Topic = e.cfg.Topics.Commands
	r.Partition = partitioner.ForEntity(rec.Entity, e.nPart)
	return e.plain.ProduceSync(ctx, r).FirstErr()
}

// reconcileKey carries out decide.Reconcile: it gathers the request's
// target (in the request's own subject: a request cannot reach another
// entity's record) and its rate, and runs the confirmation it decides.
func (j *job) reconcileKey(ctx context.Context, cmd schemas.Command, version *int64) {
	in := decide.ReconcileInput{Cmd: cmd}
	d := decide.Reconcile(in)
	for d.Verdict == decide.LookUpTarget || d.Verdict == decide.CheckRate {
		switch d.Verdict {
		case decide.LookUpTarget:
			target, found, err := j.lookup(cmd.Subject, d.Key)
			if err != nil {
				j.fail(err)
				return
			}
			in.TargetKnown = true
			if found {
				in.Target = &target
				if a := j.e.actions[target.Action]; a != nil {
					_, confirms := effect.ConfirmerOf(a.conn)
					in.ActionConfigured, in.CanLearn = true, confirms || a.policy.IdempotentByKey
				}
			}
		case decide.CheckRate:
			// Reconcile requests are not signed (they only ask the
			// connector to confirm), so anyone who can write the commands
			// topic can send them: the rate is counted per (entity, key),
			// whoever asks.
			in.RateKnown, in.Allowed = true, j.p.reconcileAllowed(scopeOf(in.Target), j.e.reconcile.every/2)
		}
		d = decide.Reconcile(in)
	}
	switch d.Verdict {
	case decide.Ignore:
		if d.Row == "reconcile-rate-limited" {
			j.e.log.Debug("reconcile request dropped: rate limit", "entity", cmd.Subject, "key", d.Key, "source", cmd.Source)
		}
	case decide.Inherit:
		// Left in progress by a crashed owner or an interrupted reconcile
		// attempt: inherit it like any in-progress key (deadline, confirm).
		target := *in.Target
		j.inherit(ctx, schemas.Command{ID: target.Command.ID, Subject: target.Entity, IdempotencyKey: target.IdempotencyKey}, target, version)
	case decide.Confirm:
		target := *in.Target
		a := j.e.actions[target.Action]
		rec := target
		rec.Executor = j.e.cfg.ExecutorID
		j.asker = d.Asker
		defer func() { j.asker = "" }()
		j.run(ctx, a, rec, target.Command.ID, false, version, func(ctx context.Context, r connectors.Request, opt effect.PerformOption) effect.Decision {
			r.Attempt = target.Attempts
			return effect.Reconcile(ctx, a.conn, r, a.policy, opt)
		}, func(dec effect.Decision) bool {
			return decide.Reconciled(dec.Outcome, j.intents > 0).Verdict == decide.Settle
		})
	default:
		j.fail(fmt.Errorf("reconcile request: decision %q (row %s) has no handler", d.Verdict, d.Row))
	}
}
