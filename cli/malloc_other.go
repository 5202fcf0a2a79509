//go:build !cgo || !linux

package cli

// limitMallocArenas has nothing to do without cgo, where Pebble's memory
// is Go memory, or off Linux (malloc_cgo.go).
func limitMallocArenas() {}
