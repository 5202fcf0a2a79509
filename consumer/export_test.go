package consumer

import (
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/schemas"
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
