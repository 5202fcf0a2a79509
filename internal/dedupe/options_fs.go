package dedupe

import "github.com/cockroachdb/pebble/v2/vfs"

// WithFS opens the index on fs instead of the operating system's file
// system (default). Tests use it to inject disk faults (pebble's
// vfs/errorfs) under a running executor.
func WithFS(fs vfs.FS) Option {
	return func(c *config) { c.fs = fs }
}
