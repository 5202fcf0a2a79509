package cli

import (
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"testing"
)

// keepGCSettings restores the runtime's memory limit and GC percent when t
// ends (applyMemoryLimit sets both), and returns what the tests apply them
// with.
func keepGCSettings(t *testing.T) (*slog.Logger, *kafkaFlags) {
	t.Helper()
	prevLimit := debug.SetMemoryLimit(-1)
	prevPercent := debug.SetGCPercent(100)
	t.Cleanup(func() {
		debug.SetMemoryLimit(prevLimit)
		debug.SetGCPercent(prevPercent)
	})
	return slog.New(slog.DiscardHandler), &kafkaFlags{Brokers: []string{"kafka:9092"}}
}

// TestServeMemoryLimit: --memory-limit wins over GOMEMLIMIT, GOMEMLIMIT
// stays as the runtime applied it, and without either serve sets none (a
// limit derived from the buffer bounds alone starved the http connector
// of CPU: docs/memory.md).
func TestServeMemoryLimit(t *testing.T) {
	log, external := keepGCSettings(t)
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

// TestServeGCPercent: under a memory limit (--memory-limit or GOMEMLIMIT)
// serve raises the collector's target to gcPercentUnderLimit, unless GOGC
// sets one; without a limit it stays as the runtime set it.
func TestServeGCPercent(t *testing.T) {
	log, external := keepGCSettings(t)
	for _, tc := range []struct {
		name             string
		o                serveOptions
		gomemlimit, gogc string
		want             int
	}{
		{"defaults", serveOptions{kf: external}, "", "", 100},
		{"--memory-limit", serveOptions{kf: external, memoryLimit: 300 << 20}, "", "", gcPercentUnderLimit},
		{"GOMEMLIMIT", serveOptions{kf: external}, "200MiB", "", gcPercentUnderLimit},
		{"GOMEMLIMIT=off", serveOptions{kf: external}, "off", "", 100},
		{"GOGC without a limit", serveOptions{kf: external}, "", "150", 150},
		{"GOGC over --memory-limit", serveOptions{kf: external, memoryLimit: 300 << 20}, "", "100", 100},
		{"GOGC over GOMEMLIMIT", serveOptions{kf: external}, "200MiB", "50", 50},
		{"GOGC=off with a limit", serveOptions{kf: external, memoryLimit: 300 << 20}, "", "off", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The runtime reads GOMEMLIMIT and GOGC once, at start: set
			// what it would have set.
			t.Setenv("GOMEMLIMIT", tc.gomemlimit)
			t.Setenv("GOGC", tc.gogc)
			limit := int64(math.MaxInt64)
			if tc.gomemlimit == "200MiB" {
				limit = 200 << 20
			}
			debug.SetMemoryLimit(limit)
			percent := 100
			switch tc.gogc {
			case "":
			case "off":
				percent = -1
			default:
				percent, _ = strconv.Atoi(tc.gogc)
			}
			debug.SetGCPercent(percent)
			applyMemoryLimit(log, &tc.o)
			got := debug.SetGCPercent(100)
			if got != tc.want {
				t.Errorf("gc percent %d, want %d", got, tc.want)
			}
		})
	}
}
