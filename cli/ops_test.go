package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceflight/onceflight/internal/broker"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/dirlock"
	"github.com/onceflight/onceflight/schemas"
)

// writeConfig writes a valid one-action file and returns its path.
func writeConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(p, []byte("actions:\n  noop.ping:\n    connector: noop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestVersion(t *testing.T) {
	code, sub, _ := runCLI("version")
	if code != exitOK {
		t.Fatalf("version: exit %d", code)
	}
	code, flag, _ := runCLI("--version")
	if code != exitOK {
		t.Fatalf("--version: exit %d", code)
	}
	if sub != flag {
		t.Errorf("version printed %q, --version %q; want the same", sub, flag)
	}
	if !strings.HasPrefix(sub, "onceflight ") || !strings.Contains(sub, runtime.Version()) || !strings.Contains(sub, "revision ") {
		t.Errorf("version output %q lacks the version, revision or %s", sub, runtime.Version())
	}

	// A release build's -X .../cli.version wins over the toolchain's.
	old := version
	version = "v9.8.7"
	defer func() { version = old }()
	if got := readBuildInfo().String(); !strings.HasPrefix(got, "onceflight v9.8.7, ") {
		t.Errorf("with -X version: %q", got)
	}
}

func TestConfigValidate(t *testing.T) {
	code, out, _ := runCLI("config", "validate", writeConfig(t))
	if code != exitOK || !strings.Contains(out, "valid, 1 actions") {
		t.Errorf("valid file: exit %d, stdout %q", code, out)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("actions:\n  a.one:\n    connector: http\n  a.two:\n    connector: noop\n    timeout: 0s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI("config", "validate", bad)
	if code != exitUsage {
		t.Errorf("invalid file: exit %d, want %d", code, exitUsage)
	}
	// Every error, not just the first.
	for _, want := range []string{`"a.one"`, `"url"`, `"a.two"`, `"timeout"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not report %s", stderr, want)
		}
	}
	// The same exit code serve gives for the same file.
	if code, _, _ := runCLI("serve", "--config", bad, "--brokers", deadAddr(t), "--data-dir", t.TempDir()); code != exitUsage {
		t.Errorf("serve with the invalid file: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := runCLI("config", "validate"); code != exitUsage {
		t.Errorf("validate without FILE: exit %d", code)
	}
}

// visible returns root and every subcommand a user sees in help.
func visible(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		out = append(out, visible(c)...)
	}
	return out
}

// TestExamples: every command's help has an Example section, and every flag
// an example uses exists on the command the example runs.
func TestExamples(t *testing.T) {
	root := newRootCmd()
	cmds := visible(root)
	if len(cmds) < 10 {
		t.Fatalf("only %d commands found", len(cmds))
	}
	flagRe := regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	for _, c := range cmds {
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no Example", c.CommandPath())
			continue
		}
		// Continuation lines (after a trailing \) belong to the line
		// before.
		text := strings.ReplaceAll(c.Example, "\\\n", " ")
		for line := range strings.SplitSeq(text, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "onceflight") {
				continue
			}
			line, _, _ = strings.Cut(line, "&&")
			words := strings.Fields(line)[1:]
			target, _, err := root.Find(words)
			if err != nil {
				t.Errorf("example %q: %v", line, err)
				continue
			}
			for _, m := range flagRe.FindAllStringSubmatch(line, -1) {
				name := m[1]
				if name == "version" && target == root {
					continue
				}
				if target.Flags().Lookup(name) == nil && target.InheritedFlags().Lookup(name) == nil {
					t.Errorf("example %q uses --%s, which %q does not have", line, name, target.CommandPath())
				}
			}
		}
	}
}

// TestSubmitTimeoutWithoutWait: with the broker down, submit without --wait
// used to retry forever; it must fail with exit 1 once --timeout passes.
func TestSubmitTimeoutWithoutWait(t *testing.T) {
	dead := deadAddr(t)
	done := make(chan struct{})
	var code int
	var stderr string
	go func() {
		defer close(done)
		code, _, stderr = runCLI("submit", "--action", "noop.ping", "--entity", "e-1", "--brokers", dead, "--timeout", "500ms")
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // a hang guard, not a measurement
		t.Fatal("submit with the broker down did not return")
	}
	if code != exitError {
		t.Errorf("exit %d, want %d; stderr %q", code, exitError, stderr)
	}
	// Either the connection check at start or the produce bounded by
	// --timeout ends it; both name the brokers.
	if !strings.Contains(stderr, "onceflight: ") || !strings.Contains(stderr, dead) {
		t.Errorf("stderr %q does not name the unreachable broker", stderr)
	}
}

// TestSubmitPrintsDerivedKey: without --key the printed key is the default
// source/id, which is what `onceflight status` needs.
func TestSubmitPrintsDerivedKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, cl := testBroker(ctx, t)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, schemas.DefaultTopics().Commands); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"--source", "shop", "--id", "c-1"}, "shop/c-1"},
		{[]string{"--key", "refund-7", "--id", "c-2"}, "refund-7"},
	} {
		args := append([]string{"submit", "--action", "noop.ping", "--entity", "e-1", "--brokers", addr}, tc.args...)
		code, out, stderr := runCLI(args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, code, stderr)
		}
		var got struct {
			ID  string `json:"id"`
			Key string `json:"key"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("stdout %q: %v", out, err)
		}
		if got.Key != tc.key {
			t.Errorf("%v: key %q, want %q", tc.args, got.Key, tc.key)
		}
	}
}

// captureLog points the default logger at a buffer for the test, for code
// that logs through slog.Default rather than the command's stderr.
func captureLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

func TestUnknownEnvWarned(t *testing.T) {
	t.Setenv("ONCEFLIGHT_BROKRES", "kafka-1:9092")     // misspelt
	t.Setenv("ONCEFLIGHT_EXECUTOR_ID", "onceflight-0") // a flag of serve, set for a whole container
	t.Setenv("ONCEFLIGHT_CHAOS", "1")                  // read by the tests on purpose
	code, _, stderr := runCLI("version")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, "ONCEFLIGHT_BROKRES") {
		t.Errorf("stderr %q does not warn about ONCEFLIGHT_BROKRES", stderr)
	}
	for _, quiet := range []string{"ONCEFLIGHT_EXECUTOR_ID", "ONCEFLIGHT_CHAOS"} {
		if strings.Contains(stderr, quiet) {
			t.Errorf("stderr %q warns about %s, which is known", stderr, quiet)
		}
	}
	got := unknownEnv(newRootCmd(), []string{"ONCEFLIGHT_BROKERS=a", "ONCEFLIGHT_MAX_INFLIGHT=3", "ONCEFLIGHT_NOPE=1", "PATH=/bin", "ONCEFLIGHT_NOPE=2"})
	if !slices.Equal(got, []string{"ONCEFLIGHT_NOPE"}) {
		t.Errorf("unknownEnv = %v, want [ONCEFLIGHT_NOPE]", got)
	}
}

// TestServeWithoutBrokersWarns: a production executor that lost its
// --brokers must say loudly that it runs on the development broker.
func TestServeWithoutBrokersWarns(t *testing.T) {
	logs := captureLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := &serveOptions{
		kf: &kafkaFlags{Topics: schemas.DefaultTopics()}, configPath: writeConfig(t), group: "g", httpAddr: "127.0.0.1:0",
		dataDir: t.TempDir(), executorID: "warn-test", sessionTimeout: 6 * time.Second, clockDrift: time.Second,
		maxInflight: 1, partitions: 1, maxDataBytes: 1 << 10, maxMsgBytes: 1 << 20, maxBuffered: 10,
		maxBufPart: 10, maxBufBytes: 1 << 20, maxBufEntity: 10, embeddedAddr: "127.0.0.1:0",
		started: func([]string, string) { cancel() },
	}
	if err := runServe(ctx, o); err != nil && ctx.Err() == nil {
		t.Fatalf("serve: %v", err)
	}
	var banner string
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, "DEVELOPMENT BROKER") {
			banner = line
		}
	}
	if !strings.Contains(banner, "level=WARN") || !strings.Contains(banner, "--brokers") {
		t.Errorf("no WARN banner naming --brokers in the log:\n%s", logs.String())
	}
}

// TestDataDirLockedNamesHolder: a second serve or broker on a data dir in
// use fails at start with exit 1, naming the directory and the holder's PID
// (serve used to fail inside Pebble with a bare EAGAIN).
func TestDataDirLockedNamesHolder(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	t.Run("serve", func(t *testing.T) {
		dir := t.TempDir()
		l, err := dirlock.Acquire(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release()
		code, _, stderr := runCLI("serve", "--config", writeConfig(t), "--brokers", deadAddr(t), "--data-dir", dir, "--http", "127.0.0.1:0")
		if code != exitError || !strings.Contains(stderr, dir) || !strings.Contains(stderr, "process "+pid) {
			t.Errorf("exit %d, stderr %q; want 1 naming %s and PID %s", code, stderr, dir, pid)
		}
	})
	t.Run("broker", func(t *testing.T) {
		dir := t.TempDir()
		b, err := broker.Start(context.Background(), "127.0.0.1:0", dir)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		code, _, stderr := runCLI("broker", "--listen", "127.0.0.1:0", "--data-dir", dir)
		if code != exitError || !strings.Contains(stderr, dir) || !strings.Contains(stderr, "process "+pid) {
			t.Errorf("exit %d, stderr %q; want 1 naming %s and PID %s", code, stderr, dir, pid)
		}
	})
}

func TestResolveByDefaultsToOSUser(t *testing.T) {
	u, err := user.Current()
	if err != nil || u.Username == "" {
		t.Skipf("no OS user name here: %v", err)
	}
	t.Setenv("USER", "")
	t.Setenv("USERNAME", "")
	if got := defaultBy(); got != u.Username {
		t.Errorf("defaultBy() = %q with $USER empty, want the OS user %q", got, u.Username)
	}
	var by *pflag.Flag
	for _, c := range newRootCmd().Commands() {
		if c.Name() == "resolve" {
			by = c.Flags().Lookup("by")
		}
	}
	if by == nil || by.DefValue != u.Username {
		t.Errorf("resolve --by default = %v, want %q", by, u.Username)
	}
}

// TestExitCodesDocumented: the exit code table users read (docs/cli.md)
// and the README's summary list exactly the codes the commands return.
func TestExitCodesDocumented(t *testing.T) {
	want := []int{exitOK, exitError, exitUsage, exitNotSucceded, exitNoOutcome, exitAuditFailed, exitTopicsNeedWork, exitInterrupted}
	slices.Sort(want)
	for _, doc := range []struct {
		file, start, end string
		code             *regexp.Regexp
	}{
		{"../docs/cli.md", "## Exit codes", "\n## ", regexp.MustCompile(`(?m)^\| (\d+) \|`)},
		{"../README.md", "Exit codes: ", "\n\n", regexp.MustCompile(`(?:^|, |\s)(\d+) [a-z]`)},
	} {
		raw, err := os.ReadFile(doc.file)
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := strings.Cut(string(raw), doc.start)
		if !ok {
			t.Errorf("%s has no %q", doc.file, doc.start)
			continue
		}
		section, _, _ = strings.Cut(section, doc.end)
		var documented []int
		for _, m := range doc.code.FindAllStringSubmatch(section, -1) {
			n, _ := strconv.Atoi(m[1])
			documented = append(documented, n)
		}
		slices.Sort(documented)
		if !slices.Equal(slices.Compact(documented), want) {
			t.Errorf("%s documents exit codes %v, the commands return %v", doc.file, documented, want)
		}
	}
}

// TestDemoServiceOnly: the compose stack's demo-service runs the refunds
// service alone; a refund applied there is confirmed by key.
func TestDemoServiceOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- runDemoService(ctx, pw, "127.0.0.1:0"); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	addr := strings.TrimSpace(strings.TrimPrefix(line, "demo refunds service listening on "))
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/refunds", strings.NewReader(`{"amount":25}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "refund-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST /refunds: %s", resp.Status)
	}
	resp, err = http.Get("http://" + addr + "/refunds/refund-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /refunds/refund-1 (confirmation): %s", resp.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("service did not stop cleanly: %v", err)
	}
	if code, _, _ := runCLI("demo", "--listen", "127.0.0.1:0"); code != exitUsage {
		t.Errorf("demo --listen without --service-only: exit %d, want %d", code, exitUsage)
	}
}

// TestServeReleasesStateWhenStartFails: serve that fails after the
// executor opened its state (here: --http already in use) releases it, so
// that a retry in the same process (an embedder's, a test's) can open the
// data dir again instead of finding Pebble's lock held.
func TestServeReleasesStateWhenStartFails(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	o := &serveOptions{
		kf: &kafkaFlags{Topics: schemas.DefaultTopics()}, configPath: writeConfig(t), group: "g", httpAddr: busy.Addr().String(),
		dataDir: dir, executorID: "busy-test", sessionTimeout: 6 * time.Second, clockDrift: time.Second,
		maxInflight: 1, partitions: 1, maxDataBytes: 1 << 10, maxMsgBytes: 1 << 20, maxBuffered: 10,
		maxBufPart: 10, maxBufBytes: 1 << 20, maxBufEntity: 10, embeddedAddr: "127.0.0.1:0",
	}
	if err := runServe(ctx, o); err == nil || !strings.Contains(err.Error(), "--http") {
		t.Fatalf("serve with --http in use: %v, want an error naming --http", err)
	}
	s, err := dedupe.Open(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatalf("the executor's state after a failed start: %v (still held by the process)", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
