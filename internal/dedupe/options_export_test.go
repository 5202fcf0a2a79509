package dedupe

// Knobs only the tests turn: the executor opens the store with the
// defaults and --cache-size, and prunes with DefaultPruneLimit.

// WithMemTableSize sets the size of one memtable in bytes (default
// DefaultMemTableSize; at least 1 MiB). Larger memtables batch more
// writes per flush and cost memtables × size of memory.
func WithMemTableSize(bytes int64) Option {
	return func(c *Settings) { c.memTable = bytes }
}

// WithEntryCache sets the entries of one generation of the in-memory
// entity and record caches (default DefaultEntryCacheEntries; at least
// 1024). Each costs about 200 bytes per entry with short keys.
func WithEntryCache(entries int) Option {
	return func(c *Settings) { c.entries = entries }
}

// PruneLimit bounds the records one call examines (stubbed, forgotten,
// skipped or backfilled together); n <= 0 means DefaultPruneLimit. The bound
// is what makes a call short enough to run periodically in the executor.
func PruneLimit(n int) PruneOption {
	return func(c *pruneConfig) { c.limit = n }
}
