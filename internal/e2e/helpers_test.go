// Package e2e tests the built onceflight binary from the outside: real
// processes (broker, serve), real clients (kcat, franz-go, the CLI), signals
// and kills. Every test starts its own broker on a free port.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// Topic names (docs/README.md defaults).
const (
	topicCommands   = "onceflight.commands"
	topicOutcomes   = "onceflight.outcomes"
	topicJournal    = "onceflight.journal"
	topicDeadletter = "onceflight.deadletter"
	testAction      = "noop.ping"
	numPartitions   = 3
)

// bin is the onceflight binary TestMain builds.
var bin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "onceflight-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "onceflight")
	args := []string{"build", "-o", bin}
	if os.Getenv("ONCEFLIGHT_E2E_RACE") != "" {
		// make chaos-race: the executor processes under the race detector.
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/onceflight/onceflight/cmd/onceflight")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build ./cmd/onceflight:", err)
		return 1
	}
	return m.Run()
}

// freePort returns an address 127.0.0.1:<port> that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// proc is a started onceflight process whose output goes to a log file.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, valid after done
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("%s: log file: %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{t: t, name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Logf("started %s (pid %d): onceflight %s", name, cmd.Process.Pid, strings.Join(args, " "))
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("--- tail of %s log ---\n%s", name, p.tail(40))
		}
	})
	return p
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to stop (SIGTERM) and kills it after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitLog polls the process log until re matches, and returns the match.
func (p *proc) waitLog(re *regexp.Regexp, timeout time.Duration) []string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := re.FindStringSubmatch(p.log()); m != nil {
			return m
		}
		if p.exited() {
			p.t.Fatalf("%s exited (%v) before logging %q:\n%s", p.name, p.err, re, p.tail(30))
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not log %q within %s:\n%s", p.name, re, timeout, p.tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startBroker starts `onceflight broker` on a free port with a fresh data
// directory and returns its address once it accepts connections.
func startBroker(t *testing.T) string {
	t.Helper()
	addr := freePort(t)
	startBrokerAt(t, addr, t.TempDir())
	return addr
}

// startBrokerAt starts `onceflight broker` on addr with its data in dir
// (a restart reuses both) and returns once it accepts connections.
func startBrokerAt(t *testing.T, addr, dir string) *proc {
	t.Helper()
	p := startProc(t, "broker", "broker", "--listen", addr, "--data-dir", dir)
	p.waitLog(regexp.MustCompile(`broker listening on`), 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker on %s not reachable: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeConfig writes an actions file with the noop action recording its
// effects, and returns the config path and the effects file path.
func writeConfig(t *testing.T) (cfg, effects string) {
	t.Helper()
	dir := t.TempDir()
	effects = filepath.Join(dir, "effects.log")
	cfg = filepath.Join(dir, "onceflight.yaml")
	yaml := fmt.Sprintf("actions:\n  %s:\n    connector: noop\n    effects_file: %s\n    timeout: 500ms\n", testAction, effects)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, effects
}

// serveOpts are the parameters of one `onceflight serve`.
type serveOpts struct {
	brokers, config, dataDir, executorID string
}

var httpAddrRe = regexp.MustCompile(`executor starting.*http=(\S+)`)

// startServe starts `onceflight serve` and returns once its HTTP server is
// up; with ready it also waits for /readyz (group joined, partitions
// restored).
func startServe(t *testing.T, o serveOpts, ready bool) *proc {
	t.Helper()
	p := startProc(t, "serve-"+o.executorID,
		"serve", "--brokers", o.brokers, "--config", o.config, "--data-dir", o.dataDir,
		"--http", "127.0.0.1:0", "--group", "e2e", "--partitions", fmt.Sprint(numPartitions),
		"--session-timeout", "6s", "--executor-id", o.executorID)
	m := p.waitLog(httpAddrRe, 60*time.Second)
	if ready {
		waitReady(t, p, m[1], 90*time.Second)
	}
	return p
}

// waitReady polls GET /readyz until it answers 200.
func waitReady(t *testing.T, p *proc, httpAddr string, timeout time.Duration) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := hc.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p.exited() {
			t.Fatalf("%s exited (%v) before ready:\n%s", p.name, p.err, p.tail(30))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %s (last: %v):\n%s", p.name, timeout, err, p.tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// outcome is an outcome event as published (structured CloudEvent JSON).
type outcome struct {
	ID             string `json:"id"`
	Type           string `json:"type"`
	Subject        string `json:"subject"`
	IdempotencyKey string `json:"idempotencykey"`
	CausationID    string `json:"causationid"`
	Replayed       bool   `json:"replayed"`
	Data           struct {
		IdempotencyKey string `json:"idempotency_key"`
		Entity         string `json:"entity"`
		Status         string `json:"status"`
		Hash           string `json:"hash"`
		Error          *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"data"`
	Raw json.RawMessage `json:"-"`
}

func parseOutcome(b []byte) (outcome, error) {
	var o outcome
	if err := json.Unmarshal(b, &o); err != nil {
		return o, err
	}
	o.Raw = append(json.RawMessage{}, b...)
	return o, nil
}

// newClient returns a read_committed franz-go client for brokers.
func newClient(t *testing.T, brokers string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// readTopic returns every committed data record of topic, from the start
// up to its last stable offset taken when the call starts.
func readTopic(ctx context.Context, brokers, topic string) ([]*kgo.Record, error) {
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, err
	}
	pending := map[int32]int64{} // partition -> last offset to read
	parts := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			pending[o.Partition] = o.Offset - 1
			parts[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(pending) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // a partition often ends with a commit marker
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(pending) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w (still pending %v)", topic, err, pending)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = err
			}
		})
		if ferr != nil {
			return nil, fmt.Errorf("read %s: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			last, ok := pending[r.Partition]
			if !ok || r.Offset > last {
				return
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset >= last {
				delete(pending, r.Partition)
			}
		})
	}
	return out, nil
}

// readOutcomes returns every committed outcome event.
func readOutcomes(t *testing.T, brokers string) []outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs, err := readTopic(ctx, brokers, topicOutcomes)
	if err != nil {
		t.Fatalf("read outcomes: %v", err)
	}
	out := make([]outcome, 0, len(recs))
	for _, r := range recs {
		o, err := parseOutcome(r.Value)
		if err != nil {
			t.Fatalf("outcome at %d/%d is not JSON: %v: %q", r.Partition, r.Offset, err, r.Value)
		}
		out = append(out, o)
	}
	return out
}

// waitOutcomes polls the outcomes topic until every id in want has at least
// one outcome, and returns all outcomes read by the last poll.
func waitOutcomes(t *testing.T, brokers string, want []string, timeout time.Duration) []outcome {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		all := readOutcomes(t, brokers)
		seen := map[string]bool{}
		for _, o := range all {
			seen[o.CausationID] = true
		}
		var missing []string
		for _, id := range want {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return all
		}
		if time.Now().After(deadline) {
			if len(missing) > 10 {
				missing = append(missing[:10], "...")
			}
			t.Fatalf("%d of %d commands have no outcome after %s: %v", len(missing), len(want), timeout, missing)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// countEffects counts the executions per key in a noop effects file. A torn
// last line (a kill mid-append) is ignored, as the connector does.
func countEffects(t *testing.T, path string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return counts
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Key string `json:"key"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Key != "" {
			counts[e.Key]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return counts
}

// streamCmd is one command of a generated stream.
type streamCmd struct {
	id, key, entity string
	repeat          bool // the key was used by an earlier command
}

// planStream makes n commands over the given number of entities; about a
// quarter repeat the key (and so the entity and data) of an earlier one.
func planStream(prefix string, n, entities int) []streamCmd {
	var cmds []streamCmd
	var keys []streamCmd
	for i := range n {
		c := streamCmd{id: fmt.Sprintf("%s-cmd-%04d", prefix, i)}
		// Deterministic pseudo-random choice: repeat every 4th command
		// after the first few, picking an earlier key spread over the
		// stream.
		if i >= 8 && i%4 == 3 {
			prev := keys[(i*7919)%len(keys)]
			c.key, c.entity, c.repeat = prev.key, prev.entity, true
		} else {
			c.key = fmt.Sprintf("%s-key-%04d", prefix, len(keys))
			c.entity = fmt.Sprintf("%s-ent-%02d", prefix, len(keys)%entities)
			keys = append(keys, c)
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// commandRecord encodes c (binary mode for even, structured for odd
// commands) for the commands topic, keyed by the entity.
func commandRecord(t *testing.T, c streamCmd, i int) *kgo.Record {
	t.Helper()
	mode := schemas.Binary
	if i%2 == 1 {
		mode = schemas.Structured
	}
	rec, err := schemas.EncodeCommand(schemas.Command{
		ID:             c.id,
		Source:         "e2e",
		Type:           testAction,
		Subject:        c.entity,
		IdempotencyKey: c.key,
		Data:           json.RawMessage(fmt.Sprintf(`{"key":%q}`, c.key)),
	}, mode)
	if err != nil {
		t.Fatalf("encode %s: %v", c.id, err)
	}
	rec.Topic = topicCommands
	rec.Key = []byte(c.entity)
	return rec
}

// checkStream checks the stream's outcomes and effects:
//   - every command id has exactly one distinct outcome id (republications of
//     the same id are counted, and allowed only if allowDup);
//   - every key was executed exactly once, unless its record is unresolved;
//   - every command of a repeated key after the first got replayed:true.
func checkStream(t *testing.T, cmds []streamCmd, outs []outcome, effectsPath string, allowDup bool) {
	t.Helper()
	byCmd := map[string][]outcome{}
	for _, o := range outs {
		byCmd[o.CausationID] = append(byCmd[o.CausationID], o)
	}
	unresolved := map[string]bool{}
	dups := 0
	firstOf := map[string]string{} // key -> first command id
	for _, c := range cmds {
		got := byCmd[c.id]
		if len(got) == 0 {
			t.Errorf("command %s (key %s): no outcome", c.id, c.key)
			continue
		}
		ids := map[string]bool{}
		for _, o := range got {
			ids[o.ID] = true
			if o.IdempotencyKey != c.key || o.Subject != c.entity {
				t.Errorf("command %s: outcome %s has key %q subject %q, want %q %q", c.id, o.ID, o.IdempotencyKey, o.Subject, c.key, c.entity)
			}
		}
		if len(ids) != 1 {
			var desc []string
			for _, o := range got {
				desc = append(desc, fmt.Sprintf("%s(%s replayed=%v)", o.ID, o.Data.Status, o.Replayed))
			}
			t.Errorf("command %s (key %s): %d distinct outcome ids: %v", c.id, c.key, len(ids), desc)
		}
		if len(got) > 1 {
			dups += len(got) - 1
		}
		o := got[0]
		switch o.Data.Status {
		case "succeeded":
		case "unresolved":
			unresolved[c.key] = true
		default:
			t.Errorf("command %s (key %s): status %s, error %+v", c.id, c.key, o.Data.Status, o.Data.Error)
		}
		if _, seen := firstOf[c.key]; seen {
			if !o.Replayed {
				t.Errorf("command %s repeats key %s of %s but its outcome has replayed=false", c.id, c.key, firstOf[c.key])
			}
		} else {
			firstOf[c.key] = c.id
		}
	}
	if dups > 0 {
		t.Logf("%d republished outcome records (same outcome id as an earlier one)", dups)
		if !allowDup {
			t.Errorf("%d duplicate outcome records", dups)
		}
	}

	effects := countEffects(t, effectsPath)
	for key := range firstOf {
		n := effects[key]
		switch {
		case unresolved[key]:
			t.Logf("key %s is unresolved (executions recorded: %d)", key, n)
		case n != 1:
			t.Errorf("key %s executed %d times, want exactly 1", key, n)
		}
	}
	for key := range effects {
		if _, ok := firstOf[key]; !ok {
			t.Errorf("effects file names key %s that no command had", key)
		}
	}
	repeats := 0
	for _, c := range cmds {
		if c.repeat {
			repeats++
		}
	}
	t.Logf("checked %d commands (%d repeats) over %d keys, %d outcome records, %d unresolved keys",
		len(cmds), repeats, len(firstOf), len(outs), len(unresolved))
}

// audit runs `onceflight audit` against the brokers and fails the test
// unless every check holds: the guarantees, checked from the records alone.
func audit(t *testing.T, brokers, group string) {
	t.Helper()
	out, errOut, code := runCLI(t, "audit", "--brokers", brokers, "--group", group)
	if code != 0 {
		t.Errorf("onceflight audit exited %d:\n%s%s", code, out, errOut)
		return
	}
	t.Logf("onceflight audit:\n%s", out)
}
