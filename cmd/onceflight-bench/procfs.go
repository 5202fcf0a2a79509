package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat. The kernel
// reports them in USER_HZ, which is 100 on every Linux ABI Go supports; it
// is not the kernel's internal HZ, so no sysconf (and no cgo) is needed.
const userHZ = 100

// procSample is what the benchmark reads of a child process at one moment:
// CPU spent so far and the peak resident set.
type procSample struct {
	CPU   time.Duration // utime + stime
	HWMKB int64         // VmHWM: the peak RSS since the process started
}

// sampleProc reads /proc/PID/stat and /proc/PID/status. Sampling at the
// start and end of a measured window, instead of using the exit rusage,
// keeps the process's start-up (join, restore) and shutdown out of the
// CPU-per-command figure.
func sampleProc(pid int) (procSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	cpu, err := parseStatCPU(stat)
	if err != nil {
		return procSample{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	hwm, err := parseStatusKB(status, "VmHWM")
	if err != nil {
		return procSample{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return procSample{CPU: cpu, HWMKB: hwm}, nil
}

// parseStatCPU returns utime+stime from the contents of /proc/PID/stat.
// The second field (comm) is in parentheses and may itself contain spaces
// and parentheses, so fields are counted from the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc stat: no ')' after comm")
	}
	// After comm: state(3) ppid(4) ... utime(14) stime(15); rest[0] is
	// field 3, so utime is rest[11].
	rest := bytes.Fields(stat[i+1:])
	if len(rest) < 13 {
		return 0, fmt.Errorf("parse /proc stat: %d fields after comm, want at least 13", len(rest))
	}
	var ticks int64
	for _, f := range rest[11:13] {
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat: cpu field %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStatusKB returns the value of a "Name:   123 kB" line of
// /proc/PID/status.
func parseStatusKB(status []byte, name string) (int64, error) {
	prefix := []byte(name + ":")
	for line := range bytes.Lines(status) {
		v, ok := bytes.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 {
			return 0, fmt.Errorf("parse /proc status: %s has no value", name)
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc status: %s: %w", name, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("parse /proc status: no %s line", name)
}

// runWatchingHWM runs cmd to its end and returns the highest VmHWM read
// of it meanwhile, in bytes (0 if none could be read). The exit rusage's
// Maxrss cannot be used on Linux: Go starts children with a vfork-like
// clone that shares the parent's memory until exec, and exec carries that
// memory's high-water mark into the child's, so a small child of a large
// benchmark process reported the benchmark's own peak.
func runWatchingHWM(cmd *exec.Cmd) (int64, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var hwm int64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if s, err := sampleProc(cmd.Process.Pid); err == nil {
			hwm = max(hwm, s.HWMKB*1024)
		}
		select {
		case err := <-done:
			return hwm, err
		case <-tick.C:
		}
	}
}
