package consumer

import (
	"context"
	"errors"
	"github.com/onceflight/onceflight/internal/connectors/limit"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// WithStoreOptions opens the executor's state with opts too: the tests'
// failing disk (dedupe.Settings.FS).
func WithStoreOptions(opts ...dedupe.Option) Option {
	return func(e *Executor) { e.storeOpts = append(e.storeOpts, opts...) }
}

// EventBufsPoisoned is how many outcome event buffers were given back
// for reuse (and poisoned: TestMain) so far.
func EventBufsPoisoned() int64 { return eventBufsPoisoned.Load() }

// Halted is haltReason, for the tests that wait for a halt.
func (e *Executor) Halted() error { return e.haltReason() }

// SetIngestBatches sets how many records a fresh catch-up ingests per
// table and the fewest it ingests, until the returned func restores them.
func SetIngestBatches(records, least int) (restore func()) {
	oldRecords, oldMin := ingestRecords, ingestMin
	ingestRecords, ingestMin = records, least
	return func() { ingestRecords, ingestMin = oldRecords, oldMin }
}

// Seen is the record of (entity, key) as a job reads it first: the
// overlay of staged records and intents, then Pebble (job.lookupAny).
func (e *Executor) Seen(entity, key string) (schemas.Record, bool, error) {
	if p := e.pipe.Load(); p != nil {
		if rec, ok := p.pendingRecord(scopedKey{entity, key}); ok {
			return rec, true, nil
		}
	}
	return e.store.Lookup(entity, key)
}

// RefetchBytes is refetchBytes, a refill's fetch size (skip.go).
var RefetchBytes = refetchBytes

// SetEntityReadHook makes every worker call hook after it takes a command
// off its entity's queue and before it reads the entity's state from the
// store, until the returned func restores the default.
func SetEntityReadHook(hook func(entity string)) (restore func()) {
	old := entityReadHook
	entityReadHook = hook
	return func() { entityReadHook = old }
}

// DrainOwned is drainPartition, as a revoke calls it, for every partition e
// owns; it returns the first drain's error.
func (e *Executor) DrainOwned(ctx context.Context) error {
	p := e.pipe.Load()
	if p == nil {
		return errors.New("no pipeline")
	}
	for _, st := range e.ownedStates() {
		if err := p.drainPartition(ctx, st); err != nil {
			return err
		}
	}
	return nil
}

// SetRestoreHook makes every partition's restore call hook as it begins
// and the function hook returns as it ends, until the returned restore is
// called.
func SetRestoreHook(hook func(p int32) (done func())) (restore func()) {
	old := restoreHook
	restoreHook = hook
	return func() { restoreHook = old }
}

// SetRepeatHook makes the poll loop call hook for every repeat it answers
// itself, without a job for the entity's worker (answerRepeat), until the
// returned func restores the default.
func SetRepeatHook(hook func(entity string)) (restore func()) {
	old := repeatHook
	repeatHook = hook
	return func() { repeatHook = old }
}

// Buffered is how many commands are buffered (dispatched, queued or
// running, not yet staged).
func (e *Executor) Buffered() int {
	p := e.pipe.Load()
	if p == nil {
		return 0
	}
	return p.memory().bufferedN
}

// SetStagedWaitHook makes every wait for staged room call hook when it
// begins (woken false) and each time it is woken (true), until the
// returned func restores the default.
func SetStagedWaitHook(hook func(woken bool)) (restore func()) {
	old := stagedWaitHook
	stagedWaitHook = hook
	return func() { stagedWaitHook = old }
}

// SetPollHook makes the poll loop call hook with each poll's records
// before it dispatches them, until the returned func restores the
// default.
func SetPollHook(hook func(recs []*kgo.Record)) (restore func()) {
	old := pollHook
	pollHook = hook
	return func() { pollHook = old }
}

// Reassign does to partition p's state what a revocation followed by a
// new assignment of p to this process does: a new state, restored from
// p's progress in the store, is installed in its place (install, as
// onAssigned does). It reports false if p is not owned.
func (e *Executor) Reassign(p int32) bool {
	prog, err := e.store.Progress(p)
	old := e.part(p)
	if err != nil || old == nil {
		return false
	}
	st := newPartState(p, prog)
	st.member = old.member
	e.install(p, st)
	return true
}

// SeenOffset is the highest offset of partition p the executor's state
// of p has tracked, -1 if none (or p is not owned).
func (e *Executor) SeenOffset(p int32) int64 {
	st := e.part(p)
	if st == nil {
		return -1
	}
	st.wmu.Lock()
	defer st.wmu.Unlock()
	return st.maxSeen
}

// SetRefillWaitHook makes every worker that begins to wait for room before
// a refill of skipped commands call hook, until the returned func restores
// the default.
func SetRefillWaitHook(hook func()) (restore func()) {
	old := refillWaitHook
	refillWaitHook = hook
	return func() { refillWaitHook = old }
}

// SystemStats is the state of the executor's external systems.
func (e *Executor) SystemStats() []limit.Stats { return e.systemStats() }

// Parked is the number of entities parked on a system that is down
// (park.go).
func (e *Executor) Parked() int64 {
	if p := e.pipe.Load(); p != nil {
		return p.parkedN.Load()
	}
	return 0
}
