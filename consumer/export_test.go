package consumer

import "github.com/onceflight/onceflight/internal/dedupe"

// WithStoreOptions opens the executor's state with opts too: the tests'
// failing disk (dedupe.Settings.FS).
func WithStoreOptions(opts ...dedupe.Option) Option {
	return func(e *Executor) { e.storeOpts = append(e.storeOpts, opts...) }
}

// Halted is haltReason, for the tests that wait for a halt.
func (e *Executor) Halted() error { return e.haltReason() }

// SetIngestBatches sets how many records a fresh catch-up ingests per
// table and the fewest it ingests, until the returned func restores them.
func SetIngestBatches(records, least int) (restore func()) {
	oldRecords, oldMin := ingestRecords, ingestMin
	ingestRecords, ingestMin = records, least
	return func() { ingestRecords, ingestMin = oldRecords, oldMin }
}
