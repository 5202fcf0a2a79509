//go:build cgo

package consumer

// pebbleCacheInGoHeap: with cgo, Pebble allocates its block cache and
// memtables with C's malloc (internal/manual), outside the Go runtime's
// memory limit.
const pebbleCacheInGoHeap = false
