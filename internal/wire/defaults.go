package wire

import "time"

// DefaultDedupeRetention and DefaultKeyMemory are how long a record's
// result, and then its key, are kept when the actions file does not say
// (docs/events.md#execution-records). They live here, beside the records
// they bound, so that the executor's configuration and the audit (which
// must not flag a key forgotten after key_memory) share them without the
// audit importing the YAML parser.
const (
	DefaultDedupeRetention = 7 * 24 * time.Hour
	DefaultKeyMemory       = 90 * 24 * time.Hour
)
