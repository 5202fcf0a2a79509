package proctest

import (
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCountLevels(t *testing.T) {
	log := strings.Join([]string{
		`time=... level=INFO msg="executor starting"`,
		`time=... level=WARN msg="slow" took=2s`,
		`{"time":"...","level":"ERROR","msg":"cycle aborted"}`,
		`time=... level=ERROR msg="second"`,
	}, "\n")
	errs, warns, first := CountLevels([]byte(log))
	if errs != 2 || warns != 1 || !strings.Contains(first, "cycle aborted") {
		t.Errorf("CountLevels = %d, %d, %q", errs, warns, first)
	}
	_, _, first = CountLevels([]byte(`level=WARN msg="only a warning"`))
	if !strings.Contains(first, "only a warning") {
		t.Errorf("first line without errors = %q, want the warning", first)
	}
}

// TestStartWaitStop drives a shell that logs a line, then waits for
// SIGTERM and exits 0 on it: WaitLog sees the line, Stop ends it cleanly;
// one that ignores SIGTERM is killed after grace and Stop says so.
func TestStartWaitStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := Start(t.TempDir(), "polite", "/bin/sh", "-c", `trap 'exit 0' TERM; echo "listening on 127.0.0.1:1"; while :; do sleep 0.05; done`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.WaitLog(ctx, regexp.MustCompile(`listening on (\S+)`))
	if err != nil || m[1] != "127.0.0.1:1" {
		t.Fatalf("WaitLog = %q, %v", m, err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop of a process that exits 0 on SIGTERM: %v", err)
	}
	if !p.Exited() {
		t.Fatal("not exited after Stop")
	}

	stubborn, err := Start(t.TempDir(), "stubborn", "/bin/sh", "-c", `trap '' TERM; echo up; while :; do sleep 0.05; done`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stubborn.WaitLog(ctx, regexp.MustCompile(`up`)); err != nil {
		t.Fatal(err)
	}
	if err := stubborn.Stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop of a process that ignores SIGTERM = %v, want killed", err)
	}
	if _, err := stubborn.WaitLog(ctx, regexp.MustCompile(`never`)); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitLog on an exited process = %v, want exited", err)
	}
}

// TestFreeAddrDistinctAndOutsideEphemeral: addresses asked for in a row
// differ, each can be listened on, and none is a port the kernel hands to
// listeners on :0 (where other tests' brokers could take it first).
func TestFreeAddrDistinctAndOutsideEphemeral(t *testing.T) {
	lo, hi := explicitPorts()
	seen := map[string]bool{}
	for range 50 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("FreeAddr handed out %s twice", addr)
		}
		seen[addr] = true
		_, ps, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(ps)
		if hi > lo && (p < lo || p >= hi) {
			t.Fatalf("FreeAddr gave port %d, want one in [%d, %d) below the ephemeral range", p, lo, hi)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on FreeAddr's %s: %v", addr, err)
		}
		ln.Close()
	}
}
