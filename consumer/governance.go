package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/internal/decide"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/schemas"
)

// Governance (issue 9): unique_by with on_duplicate (docs/configuration.md), operator
// decisions that must be signed and act on their own entity only (docs/guarantees.md#control-commands), approve and release (docs/events.md#execution-records, docs/cli.md).

// govMetrics are the governance metrics.
type govMetrics struct {
	held           prometheus.Gauge
	controlRefused *prometheus.CounterVec
}

func newGovMetrics(reg prometheus.Registerer) *govMetrics {
	g := &govMetrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_held_executions", Help: "Held records (suspected business duplicates waiting for an operator) in partitions this process owns.",
		}),
		controlRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceflight_control_refused_total", Help: "Operator decisions (resolve, approve, release) refused: not_allowed for their signature (no_key_configured, unsigned, unknown_key, bad_signature), or expired (their signed not_after has passed: a replayed copy, or a decision that waited too long).",
		}, []string{"reason"}),
	}
	for _, r := range []string{"no_key_configured", "unsigned", "unknown_key", "bad_signature", "expired"} {
		g.controlRefused.WithLabelValues(r)
	}
	reg.MustRegister(g.held, g.controlRefused)
	return g
}

// refused logs and counts an operator decision refused for its signature
// (decide: row refused). Without a key configured every decision is
// refused (docs/guarantees.md): accepting unsigned ones would let anyone
// who can write the commands topic settle records.
func (j *job) refused(cmd schemas.Command, err error) {
	reason := "bad_signature"
	switch {
	case errors.Is(err, schemas.ErrNoControlKeys):
		reason = "no_key_configured"
	case errors.Is(err, schemas.ErrNotSigned):
		reason = "unsigned"
	case errors.Is(err, schemas.ErrUnknownKey):
		reason = "unknown_key"
	}
	j.refusedFor(cmd, "not_allowed", reason, err)
}

// refusedFor logs and counts an operator decision refused with code, for
// reason.
func (j *job) refusedFor(cmd schemas.Command, code, reason string, err any) {
	j.e.m.gov.controlRefused.WithLabelValues(reason).Inc()
	j.e.log.Warn("control command refused: "+code, "type", cmd.Type, "entity", cmd.Subject, "source", cmd.Source,
		"id", cmd.ID, "key_id", cmd.ControlKeyID, "reason", reason, "err", err)
}

// expired logs and counts an operator decision refused because its signed
// not_after has passed (decide: row expired): an old copy replayed, or a
// decision that waited in the topic past its validity. Either is worth an
// operator's look, as a bad signature is.
func (j *job) expired(cmd schemas.Command, msg string) {
	j.refusedFor(cmd, "expired", "expired", msg)
}

// uniqueHolder returns the key of another record of the entity's action
// that holds tuple uk (docs/configuration.md: in_progress, succeeded within
// dedupe_retention, unresolved or held), or "". Candidates come from the
// staged records and Pebble's index; each is checked as this job sees it.
func (j *job) uniqueHolder(entity, action, uk, self string) (string, error) {
	cands := j.p.pendingUnique(entity, action, uk)
	stored, err := j.e.store.UniqueHolders(entity, action, uk)
	if err != nil {
		return "", fmt.Errorf("unique_by index of entity %q: %w", entity, err)
	}
	cands = append(cands, stored...)
	slices.Sort(cands)
	for _, k := range slices.Compact(cands) {
		if k == self {
			continue
		}
		rec, found, err := j.lookup(entity, k)
		if err != nil {
			return "", err
		}
		if !found || rec.Action != action || rec.UniqueKey != uk || !dedupe.HoldsUnique(&rec) {
			continue
		}
		if rec.Status == schemas.StatusSucceeded && rec.FinishedAt != nil && j.e.retention.keep > 0 &&
			time.Since(*rec.FinishedAt) > j.e.retention.keep {
			continue
		}
		return k, nil
	}
	return "", nil
}

// hold records a command whose unique_by tuple another execution holds,
// with on_duplicate: hold (decide): a held record that keeps the
// command's data for `onceflight approve`.
func (j *job) hold(cmd schemas.Command, d decide.Decision) {
	rec := j.base(cmd)
	rec.Status = schemas.StatusHeld
	rec.EstablishedBy = schemas.EstablishedByRule
	rec.Data = cmd.Data
	rec.UniqueKey = d.UniqueKey
	rec.Error = &schemas.Error{Code: d.Code, Message: d.Message}
	if j.tooLarge(cmd, d, &rec) {
		return // counted as the rejection it became
	}
	j.e.m.establish(&rec)
	j.e.log.Warn("suspected duplicate held for an operator", "entity", cmd.Subject, "key", cmd.IdempotencyKey,
		"action", cmd.Type, "reason", d.Message)
	j.add(emit{journal: &rec, outcome: &rec, causation: cmd.ID})
}

// approve executes a held record once (onceflight approve). The execution
// is the original command's, so its outcome is the command's second one
// (docs/events.md#execution-records settlement); the approval is recorded in its resolution.
func (j *job) approve(ctx context.Context, cmd schemas.Command, req schemas.Decision, target schemas.Record, version *int64) {
	a := j.e.actions[target.Action]
	rec, now := j.decided(target, cmd, req, "approved")
	rec.Error = nil
	rec.StartedAt = &now
	rec.EntityVersion = *version
	// The held command's own deadline is not the approval's: it may well
	// have passed while the command waited for an operator.
	j.deadline = nil
	j.run(ctx, a, rec, target.Command.ID, false, version, func(ctx context.Context, r connectors.Request, opt effect.PerformOption) effect.Decision {
		return effect.Perform(ctx, a.conn, r, a.policy, opt)
	})
	if j.err != nil {
		return
	}
	j.answerApproved(cmd, req.Key, "")
}

// applied answers an approval that was applied before it was answered:
// its execution committed its intent (the record carries the approval's
// id), then a restart interrupted it, and the approval is consumed again.
// The held command's execution is inherited if still in progress — not
// started a second time — and the approval is answered as applied, never
// rejected not_unresolved for an approval that took effect.
func (j *job) applied(ctx context.Context, cmd schemas.Command, rec schemas.Record, version *int64) {
	if rec.Status == schemas.StatusInProgress {
		orig := schemas.Command{ID: rec.Command.ID, Subject: rec.Entity, IdempotencyKey: rec.IdempotencyKey}
		j.inherit(ctx, orig, rec, version)
		if j.err != nil {
			return
		}
	}
	j.answerApproved(cmd, rec.IdempotencyKey, rec.Status)
}

// answerApproved answers an approval with the status its execution left
// the key in: this job's own record of the key if it wrote one, else st.
func (j *job) answerApproved(cmd schemas.Command, key string, st schemas.Status) {
	for i := len(j.emits) - 1; i >= 0; i-- {
		if r := j.emits[i].journal; r != nil && r.IdempotencyKey == key && r.Entity == cmd.Subject {
			st = r.Status
			break
		}
	}
	j.answerDecision(cmd, map[string]string{"approved": key, "status": string(st)})
}

// release frees a final key of the entity (docs/events.md#execution-records Release): the record
// stays, marked released, and the commands after the release with the key
// are new work. Unresolved records are settled by resolve first: releasing
// one would let the effect happen twice without anyone having looked.
func (j *job) release(cmd schemas.Command, req schemas.Decision, target schemas.Record) {
	now := time.Now().UTC()
	rel := target
	rel.Executor = j.e.cfg.ExecutorID
	// The release takes effect after its own position only: a command
	// consumed before it and consumed again is answered as before.
	off := cmd.Offset
	rel.Release = &schemas.Resolution{By: req.By, At: now, Reason: req.Reason, As: target.Status, DecisionID: cmd.ID, Offset: &off}
	j.add(emit{journal: &rel})
	j.answerDecision(cmd, map[string]string{"released": req.Key, "status": string(target.Status)})
}

// decided is target as an operator decision (resolve, approve) leaves it:
// written by this executor, with the decision in its resolution.
func (j *job) decided(target schemas.Record, cmd schemas.Command, req schemas.Decision, as schemas.Status) (schemas.Record, time.Time) {
	now := time.Now().UTC()
	rec := target
	rec.Executor = j.e.cfg.ExecutorID
	rec.Resolution = &schemas.Resolution{By: req.By, At: now, Reason: req.Reason, As: as, DecisionID: cmd.ID}
	return rec, now
}

// answerDecision records and publishes the decision command's own outcome.
func (j *job) answerDecision(cmd schemas.Command, result map[string]string) {
	now := time.Now().UTC()
	ctl := j.base(cmd)
	ctl.Status = schemas.StatusSucceeded
	ctl.EstablishedBy = schemas.EstablishedByRule
	ctl.Attempts = 1
	ctl.FinishedAt = &now
	ctl.Result, _ = json.Marshal(result)
	j.add(emit{journal: &ctl, outcome: &ctl, causation: cmd.ID})
}

// refreshHeld counts the owned partitions' held records.
func (e *Executor) refreshHeld() {
	recs, err := e.store.ByStatus(schemas.StatusHeld, 0)
	if err != nil {
		return
	}
	owned := map[int32]bool{}
	for _, p := range e.Owned() {
		owned[p] = true
	}
	n := 0
	for _, r := range recs {
		if owned[r.Command.Partition] {
			n++
		}
	}
	e.m.gov.held.Set(float64(n))
}
