package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// The latency phase measures one command at a time on a shared machine,
// so its rows come with the state of the machine they were measured in:
// the page cache's dirty bytes when the samples started (the drains before
// it leave hundreds of MB for the kernel to write back), and the CPU during
// the samples — how busy, how much of it the hypervisor took (steal), how
// often a runnable thread waited for a CPU (pressure). BENCHMARKS.md,
// "Round 18 (latency)", says which of these move the rows.

// dirtyState is /proc/meminfo's dirty page cache at one moment.
type dirtyState struct {
	DirtyKB, WritebackKB int64
}

func (d dirtyState) mb() float64 { return float64(d.DirtyKB+d.WritebackKB) / 1024 }

// parseMeminfoDirty reads Dirty and Writeback from /proc/meminfo.
func parseMeminfoDirty(meminfo []byte) (dirtyState, error) {
	var d dirtyState
	var seen int
	for line := range bytes.Lines(meminfo) {
		name, v, _ := bytes.Cut(line, []byte(":"))
		var dst *int64
		switch string(name) {
		case "Dirty":
			dst = &d.DirtyKB
		case "Writeback":
			dst = &d.WritebackKB
		default:
			continue
		}
		fields := bytes.Fields(v)
		if len(fields) == 0 {
			return d, fmt.Errorf("parse /proc/meminfo: %s has no value", name)
		}
		n, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil {
			return d, fmt.Errorf("parse /proc/meminfo: %s: %w", name, err)
		}
		*dst = n
		seen++
	}
	if seen != 2 {
		return d, fmt.Errorf("parse /proc/meminfo: no Dirty and Writeback lines")
	}
	return d, nil
}

// readProc reads a small /proc file whole and parses it: the three
// machine probes differ only in the file and the parser.
func readProc[T any](path string, parse func([]byte) (T, error)) (T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(b)
}

func readDirty() (dirtyState, error) { return readProc("/proc/meminfo", parseMeminfoDirty) }

func readCPUTimes() (cpuTimes, error) { return readProc("/proc/stat", parseProcStatCPU) }

func readPressure(name string) (float64, error) {
	return readProc("/proc/pressure/"+name, parsePressureAvg10)
}

// settled is what settleDisk did before the latency samples.
type settled struct {
	before, after dirtyState
	waited        time.Duration
	reached       bool // after is within the limit
}

// settleDisk asks the kernel to write back every dirty page (sync(2), which
// returns once they are written) and then waits, polling, until Dirty +
// Writeback is at most limitKB or maxWait has passed: other processes on a
// shared machine keep dirtying pages, so the wait is bounded and its
// outcome is reported, not assumed.
func settleDisk(ctx context.Context, limitKB int64, maxWait time.Duration) (settled, error) {
	var s settled
	var err error
	if s.before, err = readDirty(); err != nil {
		return s, err
	}
	start := time.Now()
	syscall.Sync()
	for {
		if s.after, err = readDirty(); err != nil {
			return s, err
		}
		s.waited = time.Since(start)
		if s.after.DirtyKB+s.after.WritebackKB <= limitKB {
			s.reached = true
			return s, nil
		}
		if s.waited >= maxWait {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cpuTimes is the first ("cpu") line of /proc/stat, in USER_HZ ticks.
type cpuTimes struct {
	busy, steal, total int64
}

// parseProcStatCPU reads the machine's CPU times from /proc/stat: user
// nice system idle iowait irq softirq steal …; busy is everything but idle,
// iowait and steal, total everything up to steal (guest time is inside
// user already).
func parseProcStatCPU(stat []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	rest, ok := bytes.CutPrefix(line, []byte("cpu "))
	if !ok {
		return cpuTimes{}, fmt.Errorf("parse /proc/stat: no cpu line first")
	}
	f := bytes.Fields(rest)
	if len(f) < 8 {
		return cpuTimes{}, fmt.Errorf("parse /proc/stat: %d cpu fields, want at least 8", len(f))
	}
	var v [8]int64
	for i := range v {
		n, err := strconv.ParseInt(string(f[i]), 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("parse /proc/stat: field %d: %w", i, err)
		}
		v[i] = n
	}
	var c cpuTimes
	for i, n := range v {
		c.total += n
		switch i {
		case 3, 4: // idle, iowait
		case 7:
			c.steal = n
		default:
			c.busy += n
		}
	}
	return c, nil
}

// parsePressureAvg10 reads the "some" line's avg10 of a /proc/pressure
// file: the share of the last 10 s in which at least one runnable task
// waited (for a CPU, for I/O).
func parsePressureAvg10(p []byte) (float64, error) {
	for line := range bytes.Lines(p) {
		rest, ok := bytes.CutPrefix(line, []byte("some "))
		if !ok {
			continue
		}
		for _, f := range bytes.Fields(rest) {
			if v, ok := bytes.CutPrefix(f, []byte("avg10=")); ok {
				return strconv.ParseFloat(string(v), 64)
			}
		}
	}
	return 0, fmt.Errorf("parse pressure: no some avg10")
}

// machineNote describes the machine during a measured window for a row's
// note: the CPUs' busy share and steal between a and b (cores of ncpu),
// and CPU and I/O pressure read at the end. Figures that could not be read
// are left out.
func machineNote(a, b cpuTimes, ncpu int) string {
	dt := b.total - a.total
	if dt <= 0 {
		return ""
	}
	s := fmt.Sprintf("machine busy %.2f of %d CPUs, steal %.1f %%", float64(b.busy-a.busy)/float64(dt)*float64(ncpu), ncpu, 100*float64(b.steal-a.steal)/float64(dt))
	if p, err := readPressure("cpu"); err == nil {
		s += fmt.Sprintf(", cpu pressure %.0f %%", p)
	}
	if p, err := readPressure("io"); err == nil {
		s += fmt.Sprintf(", io pressure %.0f %%", p)
	}
	return s
}

// probeIters is the fixed work of cpuProbe: ~5–15 ms of one core.
const probeIters = 4 << 20

// cpuProbe times a fixed loop (xorshift, no memory traffic) in this
// thread's own CPU time, so neither waiting for a CPU nor time the
// hypervisor took (steal, excluded from a task's CPU time under
// paravirtual time accounting) counts: what is left is how fast a CPU
// executes the same instructions now — the same machine measured at two
// moments can differ (host frequency, a busy hyperthread sibling on the
// host). It returns ns per iteration, 0 if the thread's CPU time could not
// be read.
func cpuProbe() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, err := threadCPU()
	if err != nil {
		return 0
	}
	x := uint64(88172645463325252)
	for range probeIters {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	runtime.KeepAlive(x) // the loop's result is used: not optimized away
	t1, err := threadCPU()
	if err != nil || t1 <= t0 {
		return 0
	}
	return float64(t1-t0) / probeIters
}

// threadCPU is the calling thread's user+system CPU time.
func threadCPU() (time.Duration, error) {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// idleEntries sums, over every CPU and idle state, how often the CPUs
// entered an idle state (cpuidle's usage counters). In a virtual machine
// an idle vCPU halts, and waking a thread on it goes through the
// hypervisor, so many entries per command mean the samples' wakes were of
// halted vCPUs. ok is false without cpuidle in sysfs.
func idleEntries() (n int64, ok bool) {
	paths, err := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/cpuidle/state[0-9]*/usage")
	if err != nil || len(paths) == 0 {
		return 0, false
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil {
			return 0, false
		}
		n += v
	}
	return n, true
}
