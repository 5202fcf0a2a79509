//go:build !cgo

package consumer

// pebbleCacheInGoHeap: without cgo, Pebble's block cache and memtables are
// Go byte slices, counted by the Go runtime's memory limit.
const pebbleCacheInGoHeap = true
