package cli

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

// TestServeMemoryLimit: --memory-limit wins over GOMEMLIMIT, GOMEMLIMIT
// stays as the runtime applied it, and without either serve sets none (a
// limit derived from the buffer bounds alone starved the http connector
// of CPU: docs/memory.md).
func TestServeMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	log := slog.New(slog.DiscardHandler)
	external := &kafkaFlags{Brokers: []string{"kafka:9092"}}
	for _, tc := range []struct {
		name   string
		o      serveOptions
		env    string
		before int64 // the runtime's limit before serve applies its own
		want   int64
	}{
		{"defaults", serveOptions{kf: external}, "", math.MaxInt64, math.MaxInt64},
		{"--memory-limit", serveOptions{kf: external, memoryLimit: 300 << 20}, "", math.MaxInt64, 300 << 20},
		{"--memory-limit over GOMEMLIMIT", serveOptions{kf: external, memoryLimit: 300 << 20}, "200MiB", 200 << 20, 300 << 20},
		{"GOMEMLIMIT", serveOptions{kf: external}, "200MiB", 200 << 20, 200 << 20},
		{"GOMEMLIMIT=off", serveOptions{kf: external}, "off", math.MaxInt64, math.MaxInt64},
		{"embedded broker", serveOptions{kf: &kafkaFlags{}}, "", math.MaxInt64, math.MaxInt64},
		{"console", serveOptions{kf: external, consoleAddr: "127.0.0.1:0"}, "", math.MaxInt64, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The runtime reads GOMEMLIMIT once, at start: set what it
			// would have set.
			t.Setenv("GOMEMLIMIT", tc.env)
			debug.SetMemoryLimit(tc.before)
			applyMemoryLimit(log, &tc.o)
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Errorf("memory limit %d, want %d", got, tc.want)
			}
		})
	}
}
