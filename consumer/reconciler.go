package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/onceflight/onceflight/connectors"
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
	// too, which inherits it in the entity's single flight.
	stale, err := e.store.ByStatus(schemas.StatusInProgress, 10000)
	if err != nil {
		e.log.Warn("reconciler: list in progress", "err", err)
	}
	ownedSet := map[int32]bool{}
	for _, p := range owned {
		ownedSet[p] = true
	}
	for _, rec := range stale {
		grace := e.cfg.ClockDrift + e.reconcile.every
		if a := e.actions[rec.Action]; a != nil {
			grace += a.policy.ConfirmTimeout
		}
		if ownedSet[rec.Command.Partition] && rec.Deadline != nil && time.Since(*rec.Deadline) > grace {
			recs = append(recs, rec)
		}
	}
	for _, rec := range recs {
		if rec.FinishedAt != nil && time.Since(*rec.FinishedAt) > e.reconcile.window {
			continue
		}
		if err := e.requestReconcile(ctx, rec); err != nil {
			e.log.Warn("reconciler: request", "key", rec.IdempotencyKey, "err", err)
		}
	}
}

// reconcilerSource is the source of the reconciler's own reconcile
// requests; any other source is an operator's (onceflight reconcile).
const reconcilerSource = "onceflight-reconciler"

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

// reconcileKey settles an unresolved record by confirmation (and, where the
// connector says the effect did not happen, a new attempt). A record that
// is still unknown stays as it is.
func (j *job) reconcileKey(ctx context.Context, cmd schemas.Command, version *int64) {
	var req struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(cmd.Data, &req); err != nil || req.Key == "" {
		return
	}
	// Scoped to the request's own subject: a request cannot reach another
	// entity's record.
	target, found, err := j.lookup(cmd.Subject, req.Key)
	if err != nil {
		j.fail(err)
		return
	}
	if !found {
		return
	}
	// Reconcile requests are not signed (they only ask the connector to
	// confirm), so anyone who can write the commands topic can send them:
	// each (entity, key) is confirmed at most once per half reconcile
	// period, whoever asks; the rest are dropped here.
	if !j.p.reconcileAllowed(scopeOf(&target), j.e.reconcile.every/2) {
		j.e.log.Debug("reconcile request dropped: rate limit", "entity", cmd.Subject, "key", req.Key, "source", cmd.Source)
		return
	}
	if target.Status == schemas.StatusInProgress {
		// Left in progress by a crashed owner or an interrupted reconcile
		// attempt: inherit it like any in-progress key (deadline, confirm).
		j.inherit(ctx, schemas.Command{ID: target.Command.ID, Subject: target.Entity, IdempotencyKey: target.IdempotencyKey}, target, version)
		return
	}
	if target.Status != schemas.StatusUnresolved {
		return
	}
	a := j.e.actions[target.Action]
	if a == nil {
		return
	}
	if _, ok := connectors.ConfirmerOf(a.conn); !ok && !a.policy.IdempotentByKey {
		return // nothing new can be learnt automatically
	}
	rec := target
	rec.Executor = j.e.cfg.ExecutorID
	j.asker = schemas.ByOperator
	if cmd.Source == reconcilerSource {
		j.asker = schemas.ByReconciler
	}
	defer func() { j.asker = "" }()
	j.run(ctx, a, rec, target.Command.ID, false, version, func(ctx context.Context, r connectors.Request, opt connectors.PerformOption) connectors.Decision {
		r.Attempt = target.Attempts
		return connectors.Reconcile(ctx, a.conn, r, a.policy, opt)
	}, func(d connectors.Decision) bool {
		// A decision that settles nothing is not recorded — unless an
		// attempt was made: its intent put the key back in progress, and
		// leaving it there would hold it (and its entity) forever.
		return d.Outcome != schemas.StatusUnresolved || j.intents > 0
	})
}
