package main

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseMeminfoDirty(t *testing.T) {
	meminfo := "MemTotal:       24684004 kB\nDirty:            254612 kB\nWriteback:          1024 kB\nWritebackTmp:          7 kB\n"
	got, err := parseMeminfoDirty([]byte(meminfo))
	if err != nil {
		t.Fatal(err)
	}
	if got != (dirtyState{DirtyKB: 254612, WritebackKB: 1024}) {
		t.Errorf("parseMeminfoDirty = %+v", got)
	}
	if mb := got.mb(); mb != (254612+1024)/1024.0 {
		t.Errorf("mb = %v", mb)
	}
	if _, err := parseMeminfoDirty([]byte("MemTotal: 1 kB\nDirty: 5 kB\n")); err == nil {
		t.Error("no Writeback line: no error")
	}
	if _, err := parseMeminfoDirty([]byte("Dirty: x kB\nWriteback: 0 kB\n")); err == nil {
		t.Error("bad number: no error")
	}
}

func TestParseProcStatCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  100 1 20 500 10 0 9 30 0 0\ncpu0 50 0 10 250 5 0 4 15 0 0\nintr 1\n"
	got, err := parseProcStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := (cpuTimes{busy: 130, steal: 30, total: 670}); got != want {
		t.Errorf("parseProcStatCPU = %+v, want %+v", got, want)
	}
	if _, err := parseProcStatCPU([]byte("cpu0 1 2 3\n")); err == nil {
		t.Error("no cpu line: no error")
	}
	if _, err := parseProcStatCPU([]byte("cpu  1 2 3 4\n")); err == nil {
		t.Error("short cpu line: no error")
	}
}

func TestParsePressureAvg10(t *testing.T) {
	p := "some avg10=66.86 avg60=71.84 avg300=55.76 total=4710157790\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	got, err := parsePressureAvg10([]byte(p))
	if err != nil || got != 66.86 {
		t.Errorf("parsePressureAvg10 = %v, %v; want 66.86", got, err)
	}
	if _, err := parsePressureAvg10([]byte("full avg10=1.00\n")); err == nil {
		t.Error("no some line: no error")
	}
}

func TestMachineNote(t *testing.T) {
	a := cpuTimes{busy: 100, steal: 10, total: 1000}
	b := cpuTimes{busy: 250, steal: 20, total: 1200} // 200 ticks: 150 busy, 10 steal
	note := machineNote(a, b, 2)
	if !strings.HasPrefix(note, "machine busy 1.50 of 2 CPUs, steal 5.0 %") {
		t.Errorf("machineNote = %q", note)
	}
	if machineNote(b, b, 2) != "" {
		t.Error("an empty window gave a note")
	}
}

func TestLatencyStateNote(t *testing.T) {
	lr := latencyRun{
		settle:  &settled{before: dirtyState{DirtyKB: 600 << 10}, after: dirtyState{DirtyKB: 40 << 10}, waited: 2500 * time.Millisecond},
		dirty:   &dirtyState{DirtyKB: 3 << 10, WritebackKB: 1 << 10},
		machine: "machine busy 1.00 of 2 CPUs",
		probe:   [2]float64{2.04, 2.5},

		idlePerSample: 4.25,
	}
	want := "; settled: dirty 600 → 40 MB in 2.5s (not under 32 MB); at the start dirty 3 MB, writeback 1 MB; during the samples machine busy 1.00 of 2 CPUs, 4.2 CPU idle entries a sample; cpu probe 2.04 / 2.50 ns a step before / after (thread CPU time)"
	if got := lr.stateNote(); got != want {
		t.Errorf("stateNote =\n%q\nwant\n%q", got, want)
	}
	lr.settle.reached = true
	if got := lr.stateNote(); strings.Contains(got, "not under") {
		t.Errorf("reached, yet %q", got)
	}
	if got := (latencyRun{idlePerSample: -1}).stateNote(); got != "" {
		t.Errorf("nothing read, yet %q", got)
	}
	// The raw round trip's row carries it.
	rows := latencyRows(latencyRun{raw: []time.Duration{time.Millisecond}, dirty: &dirtyState{DirtyKB: 2048}, idlePerSample: -1})
	if !strings.Contains(rows[0].Note, "at the start dirty 2 MB") {
		t.Errorf("raw p50 note = %q", rows[0].Note)
	}
}

func TestCPUProbe(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("RUSAGE_THREAD is Linux's")
	}
	// Only that it measures something: its value is the machine's.
	if ns := cpuProbe(); ns <= 0 {
		t.Errorf("cpuProbe = %v", ns)
	}
}
