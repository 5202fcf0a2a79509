// Package proctest drives onceflight processes from outside, as a user's
// deployment runs them: the end-to-end tests (internal/e2e), the
// deployment checks (deploy) and the benchmark (cmd/onceflight-bench) all
// start, watch, signal and stop the built binary through it. It returns
// errors rather than failing a testing.T, so the benchmark binary can use
// it too; the tests wrap it with their own t.Fatal.
package proctest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Package is the import path of the onceflight command Main builds.
const Package = "github.com/onceflight/onceflight/cmd/onceflight"

// build compiles the onceflight binary into a new temporary directory,
// with the race detector if race is set, and returns its path and a
// function that removes it. Tests build it once in TestMain and share it.
func build(race bool) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "onceflight-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("build %s: temp dir: %w", Package, err)
	}
	bin = filepath.Join(dir, "onceflight")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, Package)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build %s: %w", Package, err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Main is the body of a TestMain that needs the binary: it builds it
// into *bin, runs the tests, and removes it; it returns the exit
// code for os.Exit.
func Main(m interface{ Run() int }, race bool, bin *string) int {
	path, cleanup, err := build(race)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	*bin = path
	return m.Run()
}

// Proc is a started process whose output (stdout and stderr) goes to a
// log file, read back while it runs to wait for a line and afterwards to
// explain a failure.
type Proc struct {
	Name    string
	LogPath string
	Started time.Time

	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result; written once, before done is closed
}

// Start runs bin with args, output to logDir/name.log. The process gets
// its own process group, so a Ctrl-C on the parent (the benchmark, `go
// test`) reaches the parent first, which then stops its children in its
// own order (executor before broker).
func Start(logDir, name, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(logDir, name+".log")
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
	p := &Proc{Name: name, LogPath: logPath, Started: time.Now(), cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is Wait's result (nil for exit code 0); valid once Done is closed.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// ExitErr is Err naming the process and its log, nil for a clean exit.
func (p *Proc) ExitErr() error {
	if err := p.Err(); err != nil {
		return fmt.Errorf("%s (pid %d) exited: %w; see %s", p.Name, p.Pid(), err, p.LogPath)
	}
	return nil
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s (pid %d): %v: %w", p.Name, p.Pid(), sig, err)
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop asks the process to stop (SIGCONT in case a test paused it, then
// SIGTERM), waits up to grace for it to exit and kills it after. A kill is
// reported as an error: a serve that does not stop within grace is itself
// a finding (its cycle or its group leave hung). Otherwise it returns
// ExitErr.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return p.ExitErr()
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.ExitErr()
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM; killed", p.Name, p.Pid(), grace)
	}
}

// Log is the process's output so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Tail is the last n lines of the log.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogLines returns the lines of the log from byte offset from on that
// match re.
func (p *Proc) LogLines(from int, re *regexp.Regexp) []string {
	l := p.Log()
	from = min(from, len(l))
	var out []string
	for line := range strings.SplitSeq(l[from:], "\n") {
		if re.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}

// WaitLog polls the log every 50 ms until re matches and returns the
// match; it fails when the process exits first or ctx ends.
func (p *Proc) WaitLog(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	for {
		if m := re.FindStringSubmatch(p.Log()); m != nil {
			return m, nil
		}
		if p.Exited() {
			return nil, fmt.Errorf("%s exited (%v) before logging %q", p.Name, p.err, re)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s did not log %q: %w", p.Name, re, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LogCounts counts the ERROR and WARN lines in the log (see CountLevels).
func (p *Proc) LogCounts() (errs, warns int, first string) {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return 0, 0, ""
	}
	return CountLevels(b)
}

// CountLevels counts the ERROR and WARN lines of a log (slog's text and
// JSON handlers both write the level as level=ERROR / "level":"ERROR");
// first is the first ERROR line, or the first WARN line if there is no
// ERROR, shortened.
func CountLevels(b []byte) (errs, warns int, first string) {
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

// WaitTCP waits until addr accepts connections; it fails when p exits
// first or ctx ends.
func WaitTCP(ctx context.Context, p *Proc, addr string) error {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("%s exited before listening on %s: %w", p.Name, addr, p.ExitErr())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s on %s: %w (last: %v)", p.Name, addr, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitReady polls serve's GET /readyz at httpAddr every interval and
// returns when it first answers 200: group joined, partitions restored.
// The interval bounds how late the caller notices readiness (the
// benchmark polls every 2 ms to time it). It fails when p exits first
// or ctx ends, naming the last answer.
func WaitReady(ctx context.Context, p *Proc, httpAddr string, interval time.Duration) (time.Time, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + httpAddr + "/readyz"
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return time.Time{}, fmt.Errorf("readyz request: %w", err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if p.Exited() {
			return time.Time{}, fmt.Errorf("%s exited before ready: %w", p.Name, p.ExitErr())
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for %s readyz at %s: %w (last: %s)", p.Name, url, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}
