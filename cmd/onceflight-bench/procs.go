package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// child is an onceflight process the benchmark started, with its output in
// a log file. The benchmark measures the executor from outside, as a user's
// deployment would run it, so its CPU and memory are its own.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{}
	err     error // Wait's result, valid once done is closed
}

// startChild runs bin with args, output to dir/name.log. The child gets its
// own process group so a Ctrl-C on the benchmark reaches the benchmark
// first, which then stops its children in order (executor before broker).
func startChild(dir, name, bin string, args ...string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace for a clean exit, then kills.
// A kill is reported as an error: a serve that does not stop within grace
// is itself a finding (its cycle or its group leave hung).
func (c *child) stop(grace time.Duration) error {
	if c.exited() {
		return c.exitErr()
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.exitErr()
	case <-time.After(grace):
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
		return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM; killed", c.name, c.pid(), grace)
	}
}

func (c *child) exitErr() error {
	if c.err != nil {
		return fmt.Errorf("%s (pid %d) exited: %w; see %s", c.name, c.pid(), c.err, c.logPath)
	}
	return nil
}

// logCounts counts ERROR and WARN lines in the child's log (slog's text
// and JSON handlers both write the level as level=ERROR / "level":"ERROR").
func (c *child) logCounts() (errs, warns int, firstErr string) {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return 0, 0, ""
	}
	return countLevels(b)
}

// countLevels is logCounts over a log's contents; firstErr is the first
// ERROR line, or the first WARN line if there is no ERROR, shortened.
func countLevels(b []byte) (errs, warns int, first string) {
	var firstWarn string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "level=ERROR"), strings.Contains(line, `"level":"ERROR"`):
			errs++
			if first == "" {
				first = line
			}
		case strings.Contains(line, "level=WARN"), strings.Contains(line, `"level":"WARN"`):
			warns++
			if firstWarn == "" {
				firstWarn = line
			}
		}
	}
	if first == "" {
		first = firstWarn
	}
	if len(first) > 300 {
		first = first[:300] + "…"
	}
	return errs, warns, first
}

// freeAddr returns 127.0.0.1:<port> for a port that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitTCP waits until addr accepts connections or c exits.
func waitTCP(ctx context.Context, c *child, addr string) error {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			return nil
		}
		if c.exited() {
			return fmt.Errorf("%s exited before listening on %s: %w", c.name, addr, c.exitErr())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s on %s: %w", c.name, addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady polls serve's /readyz every 2 ms and returns when it first
// answers 200. The poll interval bounds how late the benchmark notices
// readiness; the drain clock also starts at the first outcome if that is
// seen earlier.
func waitReady(ctx context.Context, c *child, httpAddr string) (time.Time, error) {
	hc := &http.Client{Timeout: time.Second}
	url := "http://" + httpAddr + "/readyz"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return time.Time{}, fmt.Errorf("readyz request: %w", err)
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		if c.exited() {
			return time.Time{}, fmt.Errorf("%s exited before ready: %w", c.name, c.exitErr())
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for %s readyz at %s: %w", c.name, url, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// auditReport is the part of `onceflight audit --format json` the table
// shows.
type auditReport struct {
	Checks []struct {
		Name  string `json:"name"`
		OK    bool   `json:"ok"`
		Count int    `json:"count"`
	} `json:"checks"`
	Counts struct {
		Commands int `json:"commands"`
		Outcomes int `json:"outcomes"`
		Pending  int `json:"pending"`
	} `json:"counts"`
}

// verdict is the audit's result in a few words for the table.
func (a auditReport) verdict() string {
	var failed []string
	for _, c := range a.Checks {
		if !c.OK {
			failed = append(failed, fmt.Sprintf("%s(%d)", c.Name, c.Count))
		}
	}
	if len(failed) > 0 {
		return "FAIL " + strings.Join(failed, ",")
	}
	s := fmt.Sprintf("pass %d cmds", a.Counts.Commands)
	if a.Counts.Pending > 0 {
		s += fmt.Sprintf(", %d pending", a.Counts.Pending)
	}
	return s
}

// runAudit runs `onceflight audit` on the run's topics and returns its
// verdict. Exit code 5 means a check failed (the report is still read);
// any other failure means the audit could not run.
func (b *bench) runAudit(ctx context.Context, phase string) (string, error) {
	v, _, err := b.timedAudit(ctx, phase)
	return v, err
}

// timedAudit is runAudit that also returns the audit process's peak RSS
// in bytes (0 if unknown).
func (b *bench) timedAudit(ctx context.Context, phase string) (string, int64, error) {
	args := append([]string{"audit", "--format", "json", "--group", b.group}, b.kafkaArgs()...)
	cmd := exec.CommandContext(ctx, b.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	var rss int64
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			rss = ru.Maxrss * 1024
		}
	}
	v, err := b.auditVerdict(phase, runErr, out.Bytes(), errb.String())
	return v, rss, err
}

// auditVerdict reads an audit's JSON report into a verdict.
func (b *bench) auditVerdict(phase string, runErr error, out []byte, stderr string) (string, error) {
	_ = os.WriteFile(filepath.Join(b.dir, "audit-"+phase+".json"), out, 0o644)
	var ee *exec.ExitError
	if runErr != nil && (!errors.As(runErr, &ee) || ee.ExitCode() != 5) {
		return "error", fmt.Errorf("audit after %s: %w: %s", phase, runErr, strings.TrimSpace(stderr))
	}
	var rep auditReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return "error", fmt.Errorf("audit after %s: decode report: %w", phase, err)
	}
	v := rep.verdict()
	if strings.HasPrefix(v, "FAIL") {
		return v, fmt.Errorf("audit after %s failed: %s (report in %s)", phase, v, filepath.Join(b.dir, "audit-"+phase+".json"))
	}
	return v, nil
}
