package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// These tests cover the benchmark's pure helpers only; nothing here
// measures or asserts a speed.

func TestPercentileNearestRank(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}, {10, 1}, {11, 2}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("percentile(%v) = %d, want %d", c.p, got, c.want)
		}
	}
	if ds[0] != 5 {
		t.Error("percentile sorted its input in place")
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %d, want 0", got)
	}
}

func TestFmtNum(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{0, "-"}, {184000, "184 000"}, {1234567, "1 234 567"}, {999.6, "1 000"}, {512.4, "512"}, {42.25, "42.2"}, {7.891, "7.89"}, {0.3512, "0.351"}, {-2500, "-2 500"}} {
		if got := fmtNum(c.v); got != c.want {
			t.Errorf("fmtNum(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	// comm with a space and a ')' inside, as a process may name itself.
	stat := "4242 (on ce) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 100 2000000 3000 18446744073709551615\n"
	got, err := parseStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * time.Second; got != want { // (250+50) ticks at 100 Hz
		t.Errorf("parseStatCPU = %s, want %s", got, want)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1")); err == nil {
		t.Error("short stat: no error")
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Error("no comm: no error")
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tonceflight\nVmPeak:\t  900000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t  100000 kB\n"
	got, err := parseStatusKB([]byte(status), "VmHWM")
	if err != nil || got != 123456 {
		t.Errorf("VmHWM = %d, %v; want 123456", got, err)
	}
	if _, err := parseStatusKB([]byte(status), "VmSwap"); err == nil {
		t.Error("missing field: no error")
	}
}

func TestMaxRestoreTook(t *testing.T) {
	log := `level=INFO msg="partition restored" partition=0 epoch=3 journal_offset=10 took=12.5ms
level=INFO msg="partition restored" partition=1 epoch=3 journal_offset=10 took=1.2s
level=INFO msg="executor starting"`
	if got := maxRestoreTook([]byte(log)); got != 1200*time.Millisecond {
		t.Errorf("maxRestoreTook = %s, want 1.2s", got)
	}
}

func TestParsePhases(t *testing.T) {
	got, err := parsePhases("repeats, latency")
	if err != nil {
		t.Fatal(err)
	}
	if !got["executor"] || !got["repeats"] || !got["latency"] || got["raw"] {
		t.Errorf("parsePhases = %v: repeats must bring executor, nothing else", got)
	}
	if _, err := parsePhases("raw,bogus"); err == nil {
		t.Error("unknown phase: no error")
	}
	if _, err := parsePhases(" , "); err == nil {
		t.Error("empty list: no error")
	}
}

func TestBenchData(t *testing.T) {
	d := benchData(200)
	if len(d) != 200 || !json.Valid(d) || d[0] != '{' {
		t.Errorf("benchData(200) = %d bytes, valid %v", len(d), json.Valid(d))
	}
}

func TestAuditVerdict(t *testing.T) {
	var a auditReport
	if err := json.Unmarshal([]byte(`{"checks":[{"name":"hash_chain","ok":true},{"name":"once_per_key","ok":false,"count":3}],"counts":{"commands":10}}`), &a); err != nil {
		t.Fatal(err)
	}
	if v := a.verdict(); v != "FAIL once_per_key(3)" {
		t.Errorf("verdict = %q", v)
	}
	a.Checks[1].OK = true
	a.Counts.Pending = 2
	if v := a.verdict(); v != "pass 10 cmds, 2 pending" {
		t.Errorf("verdict = %q", v)
	}
}

func TestTableHasEveryColumn(t *testing.T) {
	r := row{Phase: "executor", Measure: "cmds/s", Value: 2400, Unit: "/s", Vs: "raw", Ratio: 0.013, Goal: "≥ 0.5×", Met: "no"}
	if c := r.cells(); len(c) != len(tableHeader) {
		t.Fatalf("%d cells for %d columns", len(c), len(tableHeader))
	}
	var sb strings.Builder
	rep := &report{Rows: []row{r}}
	if err := rep.writeMarkdown(&sb); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "| 2 400 |") || !strings.Contains(lines[2], "0.013×") {
		t.Errorf("markdown:\n%s", sb.String())
	}
}

func TestRestoredSince(t *testing.T) {
	log := []byte(`level=INFO msg="partition restored" partition=0 took=1s
level=INFO msg="partition restored" partition=1 took=1s
level=ERROR msg="restore failed; rejoining the group" partition=2 err="deadline"
level=INFO msg="partition restored" partition=0 took=1ms
level=INFO msg="partition restored" partition=2 took=3s
`)
	parts, failures := restoredSince(log)
	if failures != 1 || len(parts) != 2 || !parts[0] || !parts[2] {
		t.Errorf("restoredSince = %v, %d; want {0,2}, 1", parts, failures)
	}
	// A restore fenced by a rebalance is logged at INFO, and is a restore
	// to wait past all the same.
	moved := append(log, `level=INFO msg="restore stopped: partition moved to another member; rejoining the group" partition=5 err="fenced"
level=INFO msg="partition restored" partition=5 took=1s
`...)
	if parts, failures := restoredSince(moved); failures != 2 || len(parts) != 1 || !parts[5] {
		t.Errorf("restoredSince after a fenced restore = %v, %d; want {5}, 2", parts, failures)
	}
	if parts, failures := restoredSince([]byte(`msg="partition restored" partition=7 took=1s`)); failures != 0 || !parts[7] {
		t.Errorf("no failures: %v, %d", parts, failures)
	}
}
