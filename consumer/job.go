package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/internal/decide"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// item is one consumed command. It keeps the record's position, not the
// record: a fetched record's key and value are slices of the whole fetch
// response (up to --max-fetch-bytes), so holding it would keep that
// response live for as long as any of its commands is buffered.
type item struct {
	partition int32
	offset    int64
	cmd       schemas.Command
	size      int  // bytes, counted in its partition's buffer
	counted   bool // taken out of the buffer counts (pipeline.mu)
	// pf is its key's record as the poll loop read it ahead
	// (dispatchPoll), for its lookup (job.lookupAny).
	pf dedupe.Prefetched
	// queued is when the poll loop queued it for its entity: where its
	// trace's wait for the entity's single flight starts. Set only when
	// tracing is on; written under pipeline.mu before the entity's worker
	// can see the item.
	queued time.Time
}

// newItem is the buffered form of r, decoded as cmd.
func newItem(r *kgo.Record, cmd schemas.Command) *item {
	return &item{partition: r.Partition, offset: r.Offset, cmd: cmd, size: len(r.Value) + len(r.Key)}
}

// emit is one answer to publish, staged in the order answers were decided.
type emit struct {
	journal *schemas.Record // state change to journal, nil for none
	raw     []byte          // journal sealed (committer)
	// buf holds outcome's value (buf.b) when the committer sealed the
	// journal record straight into it (wire.SealOutcome: outcome ==
	// journal); raw is then a slice of it. The committer's apply gives
	// it back for reuse (eventBuf).
	buf *eventBuf
	// stored is outcome's value in Pebble (a replay without a journal
	// record), published as its data as it is; nil: outcome is encoded.
	stored     []byte
	outcome    *schemas.Record
	causation  string
	replayed   bool
	deadletter *kgo.Record
	reason     string
	// fresh: the journal record's key was read absent from Pebble by this
	// job and nothing else wrote it since (job.markFresh), so the
	// committer's batch does not read it again (dedupe.PutNewRecordBytes).
	fresh   bool
	forward *kgo.Record // a misrouted command, as consumed
	fwdCopy *kgo.Record // its copy for partition to, built and size-checked by the routing decision
	entity  string
	to      int32
}

// job answers one command: the decision logic of the executor. Its emits
// are staged together with the command's offset when it ends; a job that
// ends with err set is not staged, so its offset is never committed and the
// command is consumed again by whoever owns the partition next.
type job struct {
	p     *pipeline
	e     *Executor
	emits []emit
	// emitBuf backs emits for a command that answers with one emit (most
	// do): the slice grows past it only when needed (newJob).
	emitBuf [1]emit
	claimed []scopedKey
	err     error
	// version is the entity's version when the command started; records
	// that do not change it (rejections, intents) carry it.
	version int64
	// inFlight is the key Pebble says the entity has in progress, read
	// when the entity's state came from Pebble ("" if none or unknown).
	inFlight string
	// deadline is the command's own deadline, checked again right before
	// each attempt leaves.
	deadline *time.Time
	// intents counts intents this job committed.
	intents int
	// absent lists the keys Pebble held no record of when this job read
	// them (lookupAny), for markFresh.
	absent []scopedKey
	// at is the command's position: every record is looked up as the
	// command at this position sees it (decide.Seen), so a command
	// consumed again after a restart is answered as it was the first time.
	at decide.Position
	// stored is the last record this job read from Pebble as it was
	// written, with its bytes, so that replay publishes them as they are,
	// or the key of a stub it read (decide.Input.Stub).
	stored storedBytes
	// asker is who runs the current execution's confirmations
	// (schemas.By*): the executor itself unless the reconciler or an
	// operator's reconcile request does.
	asker string
	// pf is the command's key's record read ahead (item.pf), for the
	// first lookup of that key; nil once used.
	pf *dedupe.Prefetched
	// mayStepAside: the job executes a new command, which may step aside
	// for a system that is down until it has sent something (park.go);
	// steppedAside is the system it stepped aside for.
	mayStepAside bool
	steppedAside *system
}

// newJob is a job of p for one entity's command, with inFlight the key
// Pebble says the entity has in progress.
func newJob(p *pipeline, inFlight string) *job {
	j := &job{p: p, e: p.e, inFlight: inFlight}
	j.emits = j.emitBuf[:0]
	return j
}

func (j *job) handle(ctx context.Context, it *item, version *int64) {
	cmd := it.cmd
	ent := cmd.Subject
	j.begin(it, *version)
	if j.inFlight != "" && j.inFlight != cmd.IdempotencyKey {
		if !j.settleInFlight(ctx, ent, j.inFlight, version) {
			return
		}
		j.version = *version
	}
	prev, found, err := j.lookup(ent, cmd.IdempotencyKey)
	if err != nil {
		j.fail(err)
		return
	}
	in := j.input(cmd, *version, prev, found)
	d := decide.Command(in)
	if d.Verdict == decide.LookUpUnique {
		// Read here, in the entity's single flight: no other command of
		// the entity runs until this one is staged, and a staged or
		// committed holder of the tuple is visible to the read.
		in.Holder, err = j.uniqueHolder(ent, cmd.Type, d.UniqueKey, cmd.IdempotencyKey)
		if err != nil {
			j.fail(err)
			return
		}
		in.HolderKnown = true
		d = decide.Command(in)
	}
	j.carryOut(ctx, cmd, prev, &in, d, version)
}

// begin sets the job up for command it, with the entity's version as its
// worker read it.
func (j *job) begin(it *item, version int64) {
	j.at = decide.At(it.cmd)
	j.version = version
	j.deadline = it.cmd.Deadline
	j.pf = &it.pf
}

// input is what decide.Command reads for cmd, given its key's record as
// the command sees it (prev, if found). A key not found is claimed for
// cmd's fingerprint first (claim).
func (j *job) input(cmd schemas.Command, version int64, prev schemas.Record, found bool) decide.Input {
	in := decide.Input{Cmd: cmd, Version: version, Now: time.Now(), Keep: j.e.retention.keep}
	if found {
		// A copy for in: prev's own address would move it to the heap
		// for every command, a new key's (~0.5 KB) too.
		rec := prev
		in.Record = &rec
		in.Stub = j.stored.stub && j.stored.key == scopedKey{prev.Entity, prev.IdempotencyKey}
	} else {
		in.ClaimedByOther = !j.claim(cmd.Subject, cmd.IdempotencyKey, cmd.Fingerprint)
	}
	if a := j.e.actions[cmd.Type]; a != nil {
		in.Action = policy{a.cfg}
	}
	return in
}

// carryOut does what decision d (decide.Command on in) says for cmd, whose
// key's record as the command sees it is prev.
func (j *job) carryOut(ctx context.Context, cmd schemas.Command, prev schemas.Record, in *decide.Input, d decide.Decision, version *int64) {
	ent := cmd.Subject
	switch d.Verdict {
	case decide.Skip:
		j.e.log.Debug("command answered before; its key's record is a later command's", "key", cmd.IdempotencyKey,
			"entity", ent, "offset", cmd.Offset, "record_offset", prev.Command.Offset)
	case decide.Reject:
		j.reject(cmd, d.Code, d.Message, d.Journal)
	case decide.Replay:
		// in.Record: the copy made for the decision, already on the
		// heap, becomes the outcome's record (a copy of its own was one
		// more ~0.4 KiB object per repeat).
		j.replay(cmd, in.Record)
	case decide.Inherit:
		j.inherit(ctx, cmd, prev, version)
	case decide.Hold:
		j.hold(cmd, d)
	case decide.Settle:
		j.control(ctx, cmd, version)
	case decide.Execute:
		j.execute(ctx, cmd, j.e.actions[cmd.Type], version, d)
	default:
		j.fail(fmt.Errorf("decision %q (row %s) has no handler", d.Verdict, d.Row))
	}
}

// repeat is handle for a command the poll loop answers itself
// (pipeline.answerRepeat) when it is a plain repeat: its key's record, as
// the command sees it, is succeeded, failed or rejected, and the decision
// replays it. It reports whether it answered; if not — any other record or
// row, no record, an error or a panic — it has done nothing handle would
// not do again (a lookup), and the command goes to its entity's worker.
// inFlight must be "" or the command's own key (else handle settles the
// other key first).
func (j *job) repeat(ctx context.Context, it *item, version int64) (ok bool) {
	defer func() {
		if recover() != nil {
			// The worker's handle runs it again, under safeHandle.
			j.emits, ok = j.emitBuf[:0], false
		}
	}()
	cmd := it.cmd
	j.begin(it, version)
	prev, found, err := j.lookup(cmd.Subject, cmd.IdempotencyKey)
	if err != nil || !found || !plainRepeat(prev.Status) {
		return false
	}
	in := j.input(cmd, version, prev, found)
	d := decide.Command(in)
	if d.Verdict != decide.Replay {
		return false
	}
	j.carryOut(ctx, cmd, prev, &in, d, &version)
	return true
}

// plainRepeat reports whether a repeat of a record in status s is answered
// by the poll loop (job.repeat): an unresolved or held record, or one in
// progress, goes to its entity's worker.
func plainRepeat(s schemas.Status) bool {
	switch s {
	case schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected:
		return true
	}
	return false
}

// policy is an action's configuration as decide reads it.
type policy struct{ *config.Action }

func (p policy) Unique() ([]string, bool) {
	return p.UniqueBy, p.OnDuplicate == config.OnDuplicateHold
}

// control applies a control command: an operator decision once its
// signature verifies, or a reconcile request.
func (j *job) control(ctx context.Context, cmd schemas.Command, version *int64) {
	if cmd.Type == schemas.TypeReconcile {
		j.reconcileKey(ctx, cmd, version)
		return
	}
	in := decide.DecisionInput{Cmd: cmd, SignatureErr: j.e.cfg.ControlKeys.VerifyControl(&cmd), Now: time.Now()}
	d := decide.Operator(in)
	if d.Verdict == decide.LookUpTarget {
		// In the decision's own entity only: a decision never reaches
		// another entity's record, whatever its data says.
		t, found, err := j.lookupNamed(cmd.Subject, d.Req.Key)
		if err != nil {
			j.fail(err)
			return
		}
		in.TargetKnown = true
		if found {
			in.Target, in.ActionConfigured = &t, j.e.actions[t.Action] != nil
		}
		d = decide.Operator(in)
	}
	switch d.Verdict {
	case decide.Reject:
		if in.SignatureErr != nil {
			j.refused(cmd, in.SignatureErr)
		} else if d.Row == "expired" {
			j.expired(cmd, d.Message)
		}
		j.reject(cmd, d.Code, d.Message, d.Journal)
	case decide.Resolve:
		j.resolve(cmd, d.Req, *in.Target)
	case decide.Approve:
		j.approve(ctx, cmd, d.Req, *in.Target, version)
	case decide.Applied:
		j.applied(ctx, cmd, *in.Target, version)
	case decide.Release:
		j.release(cmd, d.Req, *in.Target)
	default:
		j.fail(fmt.Errorf("operator decision %q (row %s) has no handler", d.Verdict, d.Row))
	}
}

// settleInFlight settles another key the entity has in progress — left by
// an owner that crashed, or by a reconcile attempt — before the entity's
// next command may run (G1): whatever request started an execution, it is
// inherited (deadline, then confirmation). It reports whether the command
// may go on.
func (j *job) settleInFlight(ctx context.Context, entity, key string, version *int64) bool {
	prev, found, err := j.lookup(entity, key)
	if err != nil {
		j.fail(err)
		return false
	}
	var rec *schemas.Record
	if found {
		rec = &prev
	}
	if decide.InFlight(rec).Verdict != decide.Inherit {
		return true
	}
	j.e.log.Warn("entity has an execution in progress from an earlier owner or attempt; settling it first",
		"entity", prev.Entity, "key", key, "deadline", prev.Deadline)
	orig := schemas.Command{ID: prev.Command.ID, Subject: prev.Entity, IdempotencyKey: key}
	j.inherit(ctx, orig, prev, version)
	return j.err == nil
}

// execute runs a new command through its connector.
func (j *job) execute(ctx context.Context, cmd schemas.Command, a *action, version *int64, d decide.Decision) {
	now := time.Now().UTC()
	rec := j.base(cmd)
	rec.StartedAt = &now
	rec.Data = cmd.Data
	rec.UniqueKey = d.UniqueKey
	probe := rec
	probe.Status = schemas.StatusInProgress
	if j.tooLarge(cmd, d, &probe) {
		return
	}
	// Only a job that has answered nothing yet may step aside: one that
	// settled another key of the entity first (settleInFlight) has that
	// settlement to stage, and a job with emits is staged as its
	// command's answer — a command that stepped aside then had its offset
	// committed without ever running
	// (TestSteppedAsideNotAfterSettlingAnInheritedKey). It waits instead.
	j.mayStepAside = len(j.emits) == 0
	j.run(ctx, a, rec, cmd.ID, false, version, func(ctx context.Context, req connectors.Request, opt effect.PerformOption) effect.Decision {
		return effect.Perform(ctx, a.conn, req, a.policy, opt)
	})
}

// tooLarge carries out decide.Sized for the record d would write: it
// reports whether the command was rejected too_large instead.
func (j *job) tooLarge(cmd schemas.Command, d decide.Decision, rec *schemas.Record) bool {
	s := decide.Sized(d, j.e.fits(rec), len(cmd.Data)+recordOverhead, j.e.cfg.MaxMessageBytes)
	if s.Verdict != decide.Reject {
		return false
	}
	j.e.m.tooLarge.Inc()
	j.reject(cmd, s.Code, s.Message, s.Journal)
	return true
}

// inherit settles a key left in_progress by an earlier owner (or by our own
// abandoned attempt): wait until its recorded deadline plus the clock-drift
// margin has passed — the old attempt can no longer be sent after it — then
// confirm before anything else (G3).
func (j *job) inherit(ctx context.Context, cmd schemas.Command, prev schemas.Record, version *int64) {
	if prev.Deadline != nil {
		wait := time.Until(prev.Deadline.Add(j.e.cfg.ClockDrift))
		if wait > 0 {
			j.e.log.Info("waiting for an inherited execution's deadline", "key", prev.IdempotencyKey, "entity", prev.Entity, "wait", wait)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				j.fail(ctx.Err())
				return
			}
		}
	}
	a := j.e.actions[prev.Action]
	d := decide.Inheriting(prev, a != nil)
	if d.Verdict == decide.Unresolved {
		fin := prev
		j.finalize(&fin, effect.Decision{Outcome: schemas.StatusUnresolved, Code: d.Code,
			Message: d.Message, Attempts: prev.Attempts, EstablishedBy: schemas.EstablishedByRule}, version)
		j.add(emit{journal: &fin, outcome: &fin, causation: cmd.ID, replayed: cmd.ID != prev.Command.ID})
		return
	}
	rec := prev
	rec.Executor = j.e.cfg.ExecutorID
	j.run(ctx, a, rec, cmd.ID, cmd.ID != prev.Command.ID, version, func(ctx context.Context, req connectors.Request, opt effect.PerformOption) effect.Decision {
		req.Attempt = prev.Attempts
		if prev.Deadline != nil {
			req.Deadline = *prev.Deadline
		}
		if d.Verdict == decide.Reexecute {
			opt = effect.Options(opt, effect.WithLastNotDone())
		}
		return effect.Reconcile(ctx, a.conn, req, a.policy, opt)
	})
}

type performFunc func(context.Context, connectors.Request, effect.PerformOption) effect.Decision

// run drives rec through perform, recording every attempt's intent first.
//
// keep, when given, decides whether a decision is recorded at all: the
// reconciler records only decisions that settle an unresolved record.
func (j *job) run(ctx context.Context, a *action, rec schemas.Record, causation string, replayed bool, version *int64, perform performFunc, keep ...func(effect.Decision) bool) {
	p := rec.Command.Partition
	st := j.e.part(p)
	if st == nil {
		j.fail(errFenced)
		return
	}
	// The status is being established anew: the intents of this run say
	// in_progress, established by nothing yet (finalize sets it).
	rec.EstablishedBy = ""
	req := connectors.Request{
		Action: rec.Action, Entity: rec.Entity, Key: rec.IdempotencyKey, Attempt: 1,
		FencingToken: rec.FencingToken, Data: rec.Data, TraceParent: rec.TraceParent,
	}
	x := &execution{j: j, a: a, p: p, rec: rec}
	_, x.confirms = effect.ConfirmerOf(a.conn)
	// The request goes through its external system: its limits and
	// breaker, then a slot of the partition at that system. Both are held
	// only while a request is out, not while the command waits for them,
	// a Retry-After or a backoff (the job itself, and so the entity's
	// turn, waits). The command's deadline bounds the waits too.
	x.call = effect.Call{Hooks: x, Gate: x, Slot: a.sys.slots(p)}
	if j.deadline != nil {
		x.call.NotAfter = *j.deadline
	}
	start := time.Now()
	ctx, endSpan := j.traceExecution(ctx, x.rec)
	dec := perform(ctx, req, &x.call)
	endSpan(dec)
	d := decide.Performed(dec, j.asker)
	if d.Verdict == decide.StepAside {
		// Nothing was sent nor recorded: the worker parks the entity.
		j.steppedAside = a.sys
		return
	}
	j.e.m.executed(x.rec.Action, dec.Outcome, time.Since(start))
	if d.Verdict == decide.Ignore {
		// No decision: the record stays in_progress in the journal with
		// its deadline, and the command is not answered, so it is consumed
		// again by whoever owns the partition.
		j.fail(fmt.Errorf("key %q: %s: %s", x.rec.IdempotencyKey, dec.Code, dec.Message))
		return
	}
	if len(keep) > 0 && !keep[0](dec) {
		return
	}
	dec.EstablishedBy = cmp.Or(d.EstablishedBy, dec.EstablishedBy)
	j.finalize(&x.rec, dec, version)
	j.add(emit{journal: &x.rec, outcome: &x.rec, causation: causation, replayed: replayed})
}

// execution is one run's record as its attempts build it, and the
// executor's hooks into effect.Perform (effect.Hooks) as its methods:
// one heap object per command, where a closure per hook and per option
// was ~10.
type execution struct {
	j        *job
	a        *action
	p        int32
	confirms bool // the connector can confirm (effect.ConfirmerOf)
	// attempted: BeforeAttempt was called, so the call has (or may
	// have) sent a request; notDoneLast: every request it sent was
	// answered "not done" and the last intent recorded says so
	// (notDoneRecord). A call may step aside until it has attempted, or
	// while notDoneLast: read again, such a key is inherited and attempted
	// again at once, as after a takeover (decide row inherit-not-done).
	attempted, notDoneLast bool
	// shed: the entity's queued commands were let go while this one
	// waits for its system (pipeline.shed).
	shed bool
	rec  schemas.Record
	call effect.Call
}

// Acquire is the call's Gate (effect.Gate): its system's. While the
// system is down, the entity's queued commands are let go (they can only
// wait behind this one: pipeline.shed), and a new command's call steps
// aside instead of waiting, as long as nothing it sent may have taken
// effect (park.go).
func (x *execution) Acquire(ctx context.Context, notBefore time.Time) (effect.Permit, error) {
	if !x.shed && x.a.sys.Down() {
		x.shed = true
		x.j.p.shed(x.rec.Entity, x.p)
	}
	if x.j.mayStepAside && (!x.attempted || x.notDoneLast) {
		return x.a.sys.AcquireOrStepAside(ctx, notBefore)
	}
	return x.a.sys.Acquire(ctx, notBefore)
}

// expired stops an attempt whose command's own deadline passed.
func (x *execution) expired() error {
	if d := x.j.deadline; d != nil && time.Now().After(*d) {
		return &effect.StopError{Code: schemas.CodeExpired,
			Message: fmt.Sprintf("deadline %s passed before the attempt could be sent", d.Format(time.RFC3339))}
	}
	return nil
}

// BeforeAttempt records the attempt's intent, with a fencing token of its
// own: it leaves only once that intent committed and the command's own
// deadline is checked on both sides of the wait.
func (x *execution) BeforeAttempt(ctx context.Context, r *connectors.Request) error {
	x.attempted, x.notDoneLast = true, false
	if err := x.expired(); err != nil {
		return err
	}
	if x.a.effectless {
		return nil
	}
	in := x.rec
	in.Status = schemas.StatusInProgress
	in.Attempts = r.Attempt
	d := r.Deadline.UTC()
	in.Deadline = &d
	in.Error, in.Result, in.FinishedAt = nil, nil, nil
	tok, err := x.j.intent(ctx, x.p, in)
	if err != nil {
		return err
	}
	x.j.intents++
	r.FencingToken = tok
	x.rec.FencingToken = tok
	return x.expired()
}

// NotDone records that the attempt took no effect and the command waits
// (notDoneRecord); an effectless action has nothing to record.
func (x *execution) NotDone(ctx context.Context, r *connectors.Request, res connectors.Result) {
	if x.a.effectless {
		x.notDoneLast = true
		return
	}
	if tok, err := x.j.intent(ctx, x.p, notDoneRecord(x.rec, r, res)); err == nil {
		x.j.intents++
		r.FencingToken, x.rec.FencingToken = tok, tok
		x.notDoneLast = true
	}
}

// Evidence writes every attempt's answer and every confirmation into the
// record as the execution goes (docs/events.md#evidence); the intents and
// the final record carry it. An ambiguous answer that will be confirmed
// is journaled at once (an intent): a crash before the confirmation
// leaves a record that says "ambiguous, confirmation pending", and the
// next owner confirms it.
func (x *execution) Evidence(ctx context.Context, r *connectors.Request, ev schemas.Evidence) {
	if ev.Kind == schemas.EvidenceConfirm {
		ev.By = cmp.Or(x.j.asker, schemas.ByExecutor)
	}
	wire.AddEvidence(&x.rec, ev)
	if x.a.effectless || !x.confirms || ev.Kind != schemas.EvidenceAttempt || ev.Answer != schemas.AnswerAmbiguous {
		return
	}
	in := x.rec
	in.Status = schemas.StatusInProgress
	in.Attempts = r.Attempt
	d := r.Deadline.UTC()
	in.Deadline = &d
	in.Error = &schemas.Error{Code: schemas.CodeConfirmationPending, Message: "attempt " + strconv.Itoa(r.Attempt) + " answered ambiguously; confirmation pending: " + ev.Detail}
	in.Result, in.FinishedAt = nil, nil
	if tok, err := x.j.intent(ctx, x.p, in); err == nil {
		x.j.intents++
		x.rec.FencingToken = tok
	}
}

func (j *job) finalize(rec *schemas.Record, dec effect.Decision, version *int64) {
	now := time.Now().UTC()
	rec.Status = dec.Outcome
	rec.Attempts = dec.Attempts
	rec.FinishedAt = &now
	rec.Deadline = nil
	rec.Result, rec.Error = nil, nil
	if dec.Outcome == schemas.StatusSucceeded {
		rec.Result = dec.Result
		*version++
	} else {
		rec.Error = &schemas.Error{Code: dec.Code, Message: dec.Message}
	}
	rec.EntityVersion = *version
	rec.Executor = j.e.cfg.ExecutorID
	rec.EstablishedBy = cmp.Or(dec.EstablishedBy, schemas.EstablishedByAnswer)
	j.e.m.establish(rec)
}

// resolve applies an operator's decision (onceflight resolve) to an
// unresolved or held record, and answers the control command itself.
func (j *job) resolve(cmd schemas.Command, req schemas.Decision, target schemas.Record) {
	as := schemas.Status(req.As)
	res, now := j.decided(target, cmd, req, as)
	res.Status = as
	res.FinishedAt = &now
	res.EstablishedBy = schemas.EstablishedByOperator
	j.e.m.establish(&res)
	if as == schemas.StatusSucceeded {
		res.Error = nil
	} else if res.Error == nil {
		res.Error = &schemas.Error{Code: "resolved_by_operator", Message: req.Reason}
	}
	j.add(emit{journal: &res, outcome: &res, causation: target.Command.ID})
	j.answerDecision(cmd, map[string]string{"resolved": req.Key, "as": req.As})
}

func (j *job) base(cmd schemas.Command) schemas.Record {
	return schemas.Record{
		IdempotencyKey: cmd.IdempotencyKey,
		Entity:         cmd.Subject,
		Action:         cmd.Type,
		Fingerprint:    cmd.Fingerprint,
		Command:        schemas.CommandRef{ID: cmd.ID, Source: cmd.Source, Partition: cmd.Partition, Offset: cmd.Offset},
		Executor:       j.e.cfg.ExecutorID,
		TraceParent:    cmd.TraceParent,
		EntityVersion:  j.version,
	}
}

// reject answers cmd with a rejected record. journal=false leaves the
// key's existing record untouched (a reused key must not overwrite it).
func (j *job) reject(cmd schemas.Command, code, msg string, journal bool) {
	now := time.Now().UTC()
	rec := j.base(cmd)
	rec.Status = schemas.StatusRejected
	rec.FinishedAt = &now
	rec.Error = &schemas.Error{Code: code, Message: msg}
	rec.EstablishedBy = schemas.EstablishedByRule
	j.e.m.establish(&rec)
	e := emit{outcome: &rec, causation: cmd.ID}
	if journal {
		e.journal = &rec
	}
	j.add(e)
}

// replay answers cmd with prev, the record of its key, which nothing
// changes afterwards.
func (j *job) replay(cmd schemas.Command, prev *schemas.Record) {
	j.e.m.replays.Inc()
	// The command that produced the record, consumed again after a
	// crash between commit and offset, is a republication: same outcome
	// id, and not marked replayed.
	em := emit{outcome: prev, causation: cmd.ID, replayed: cmd.ID != prev.Command.ID}
	// The recorded result is re-emitted as it was recorded: the record's
	// stored bytes, not the record decoded and encoded again (the same
	// bytes for a record this build wrote, and a record written by
	// another version keeps the fields this one does not know).
	if !j.stored.stub && j.stored.key == (scopedKey{prev.Entity, prev.IdempotencyKey}) {
		em.stored = j.stored.raw
	}
	j.add(em)
}

// storedBytes is a record's key and its value in Pebble; for a stub
// (stub true: what Prune keeps of a record, never replayed) no value.
type storedBytes struct {
	key  scopedKey
	raw  []byte
	stub bool
}

// tooLargeToForward answers a misrouted command whose copy would not fit
// the commands topic (decide.Route, row too-large-to-forward):
// deadlettered (by reference: the original stays at its offset) and
// rejected too_large, never executed out of place.
func (j *job) tooLargeToForward(r *kgo.Record, cmd schemas.Command, d decide.Decision) {
	j.e.m.tooLarge.Inc()
	j.add(emit{deadletter: r, reason: d.Code + ": " + d.Message})
	now := time.Now().UTC()
	rec := j.base(cmd)
	rec.Status = schemas.StatusRejected
	rec.FinishedAt = &now
	rec.Error = &schemas.Error{Code: d.Code, Message: d.Message}
	j.add(emit{outcome: &rec, causation: cmd.ID})
}

// undecodable sends r to the deadletter topic and, when an entity can be
// read from it (d.Code set), answers it with a rejected outcome too
// (decide.Route, row undecodable; docs/events.md#execution-records).
func (j *job) undecodable(r *kgo.Record, err error, d decide.Decision) {
	j.e.m.deadletters.Inc()
	reason := d.Message
	j.add(emit{deadletter: r, reason: reason})
	var de *schemas.DecodeError
	if d.Code == "" || !errors.As(err, &de) {
		return
	}
	now := time.Now().UTC()
	ref := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
	rec := schemas.Record{
		IdempotencyKey: "invalid/" + ref,
		Entity:         de.Entity,
		Status:         schemas.StatusRejected,
		Command:        schemas.CommandRef{ID: ref, Partition: r.Partition, Offset: r.Offset},
		FinishedAt:     &now,
		Executor:       j.e.cfg.ExecutorID,
		Error:          &schemas.Error{Code: d.Code, Message: reason},
	}
	j.add(emit{outcome: &rec, causation: ref})
}

// lookup is the record of (entity, key) as this job's command sees it at
// its position (decide.Seen): its own records, then the staged ones, then
// Pebble. A record released before the command, a rejection of an earlier
// command that is not final for the key, or one past key_memory is no
// record: the key is new work.
func (j *job) lookup(entity, key string) (schemas.Record, bool, error) {
	rec, ok, err := j.lookupAny(entity, key)
	if err != nil {
		return rec, false, err
	}
	rec, ok = decide.Seen(rec, ok, j.at)
	return rec, ok, nil
}

// lookupNamed is the record an operator decision names, as the decision
// sees it at its position (decide.Named).
func (j *job) lookupNamed(entity, key string) (schemas.Record, bool, error) {
	rec, ok, err := j.lookupAny(entity, key)
	if err != nil {
		return rec, false, err
	}
	rec, ok = decide.Named(rec, ok, j.at)
	return rec, ok, nil
}

func (j *job) lookupAny(entity, key string) (schemas.Record, bool, error) {
	// stored is the bytes of this lookup's record only (replay).
	j.stored = storedBytes{}
	// This job's own records come first: it may have settled the key
	// already (an inherited execution settled before a reconcile request).
	for i := len(j.emits) - 1; i >= 0; i-- {
		if rec := j.emits[i].journal; rec != nil && rec.IdempotencyKey == key && rec.Entity == entity {
			return *rec, true, nil
		}
	}
	if rec, ok := j.p.pendingRecord(scopedKey{entity, key}); ok {
		return rec, true, nil
	}
	rec, raw, ok, err := j.lookupStore(entity, key)
	if err != nil {
		return rec, false, fmt.Errorf("dedupe lookup %q of entity %q: %w", key, entity, err)
	}
	if !ok {
		j.absent = append(j.absent, scopedKey{entity, key})
	} else if rec.Hash != "" && rec.Release == nil {
		// A sealed journal record (a stub has no hash) that decide.Seen
		// will not change: its bytes are its outcome's data (replay).
		j.stored = storedBytes{key: scopedKey{entity, key}, raw: raw}
	} else if rec.Hash == "" && rec.Status.Final() {
		// Every journal record is sealed (hashed); in Pebble only a
		// stub has no hash (dedupe's Prune dropped it with the result).
		j.stored = storedBytes{key: scopedKey{entity, key}, stub: true}
	}
	// Past key_memory a key is forgotten (docs/events.md#execution-records): a command with it is
	// new work.
	if ok && rec.Status.Final() && rec.FinishedAt != nil && j.e.retention.memory > 0 &&
		time.Since(*rec.FinishedAt) > j.e.retention.memory {
		return schemas.Record{}, false, nil
	}
	return rec, ok, nil
}

// lookupStore is the record of (entity, key) in Pebble, with its stored
// bytes: the one the poll loop read ahead for this command (item.pf) if
// it is of this key and no write of the key returned since, else read now.
func (j *job) lookupStore(entity, key string) (schemas.Record, []byte, bool, error) {
	if pf := j.pf; pf != nil && pf.For(entity, key) {
		j.pf = nil
		return j.e.store.LookupPrefetched(entity, key, pf)
	}
	return j.e.store.LookupBytes(entity, key)
}

// claim reserves a new key for the first fingerprint that uses it until its
// answer is staged; a command of another entity reusing it meanwhile is
// rejected.
func (j *job) claim(entity, key, fp string) bool {
	k := scopedKey{entity, key}
	ok := j.p.claim(k, fp)
	if ok {
		j.claimed = append(j.claimed, k)
	}
	return ok
}

func (j *job) add(e emit) { j.emits = append(j.emits, e) }

// intent queues an intent of this job's execution (committer.intent).
// It is never written to Pebble (the overlay serves it until its key's
// next record replaces it), so it leaves a key read as absent absent for
// markFresh.
func (j *job) intent(ctx context.Context, p int32, rec schemas.Record) (int64, error) {
	return j.p.cm.intent(ctx, p, rec)
}

// takeAbsent reports whether k is among the keys this job read as absent,
// and removes it: every time it was read (a key looked up twice is listed
// twice), so only its first write is taken for new.
func (j *job) takeAbsent(k scopedKey) bool {
	n := len(j.absent)
	j.absent = slices.DeleteFunc(j.absent, func(a scopedKey) bool { return a == k })
	return len(j.absent) < n
}

// markFresh flags the first journal record of each key this job read as
// absent from Pebble (emit.fresh). Nothing else can have written such a
// key since: its entity's commands run one at a time on this worker, each
// answer is in the overlay (read before Pebble) until Pebble holds it,
// only the committer writes Pebble, in queue order, and it never writes
// an intent (the job's own intents of the key stay in the overlay). A
// later journal record of the same key in the job goes into the same
// batch, which knows the first.
func (j *job) markFresh() {
	if len(j.absent) == 0 {
		return
	}
	for i := range j.emits {
		r := j.emits[i].journal
		if r == nil {
			continue
		}
		if j.takeAbsent(scopeOf(r)) {
			j.emits[i].fresh = true
		}
	}
}

func (j *job) fail(err error) {
	if j.err == nil {
		j.err = err
	}
}

// safeHandle is handle with a last line of defence: a panic (a bug) answers
// the command `unresolved` (code executor_error) instead of crashing the
// process or, worse, leaving the partition stuck on a command that panics
// every time it is consumed. Unresolved, because an attempt may have been
// sent before the panic; an operator can look and resolve it.
func (j *job) safeHandle(ctx context.Context, it *item, version *int64) {
	j.at = decide.At(it.cmd)
	ctx, endSpan := j.traceCommand(ctx, it)
	defer endSpan() // after the recovery below: the span ends with the answer
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		j.e.log.Error("panic while handling a command; answered unresolved", "key", it.cmd.IdempotencyKey,
			"entity", it.cmd.Subject, "partition", it.partition, "offset", it.offset, "panic", r, "stack", string(debug.Stack()))
		j.emits, j.err = nil, nil
		prev, found, err := j.lookup(it.cmd.Subject, it.cmd.IdempotencyKey)
		var seen *schemas.Record
		if found {
			seen = &prev
		}
		d := decide.Panicked(seen, r)
		now := time.Now().UTC()
		rec := j.base(it.cmd)
		rec.Status = schemas.StatusUnresolved
		rec.FinishedAt = &now
		rec.Error = &schemas.Error{Code: d.Code, Message: d.Message}
		rec.EstablishedBy = schemas.EstablishedByRule
		e := emit{outcome: &rec, causation: it.cmd.ID}
		// Never overwrite a final record of the key (nor one the lookup
		// could not read).
		if err == nil && d.Journal {
			e.journal = &rec
		}
		j.add(e)
	}()
	j.handle(ctx, it, version)
}
