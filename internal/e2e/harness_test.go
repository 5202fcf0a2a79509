// Package e2e tests the built onceflight binary from the outside: real
// processes (broker, serve), real clients (kcat, franz-go, the CLI), signals
// and kills. Every test starts its own broker on a free port.
//
// This file is the one harness every test uses: processes (startProc,
// startBroker, startServe, over internal/proctest), the actions file
// (writeConfig), commands (command, commandRecord, kcatProduce, producer),
// outcomes (outcome, readOutcomes, kcatOutcomes, waitOutcomes,
// checkOutcomes), effects (countEffects, the apifake.Effects service of
// service_test.go), metrics and the audit. A new fault scenario
// is a chaosCluster (chaos_test.go), a producer, the fault, and checkChaos.
package e2e

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
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/brokertest"
	"github.com/onceflight/onceflight/internal/proctest"
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
	defaultGroup    = "e2e"
)

// bin is the onceflight binary TestMain builds.
var bin string

func TestMain(m *testing.M) {
	// make chaos-race: the executor processes under the race detector.
	os.Exit(proctest.Main(m, os.Getenv("ONCEFLIGHT_E2E_RACE") != "", &bin))
}

// freePort returns an address 127.0.0.1:<port> that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// ---------------------------------------------------------------------------
// Processes.

// runCmd runs path with stdin and returns stdout, stderr and the exit code.
func runCmd(t *testing.T, path, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s %s: %v", filepath.Base(path), strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

// runCLI runs the onceflight binary and returns stdout, stderr and the exit
// code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runCmd(t, bin, "", args...)
}

// proc is a started onceflight process (proctest.Proc) bound to its test.
type proc struct {
	*proctest.Proc
	t        *testing.T
	httpAddr string // serve: its HTTP server
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProcOf(t, bin, name, args...)
}

// startProcOf starts the onceflight binary at path: another release's, for
// the upgrade test. The process is stopped when the test ends, and its log
// shown if the test failed.
func startProcOf(t *testing.T, path, name string, args ...string) *proc {
	t.Helper()
	pp, err := proctest.Start(t.TempDir(), name, path, args...)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{Proc: pp, t: t}
	t.Logf("started %s (pid %d): onceflight %s", name, p.Pid(), strings.Join(args, " "))
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("--- tail of %s log ---\n%s", name, p.Tail(40))
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// term sends SIGTERM and fails the test unless the process exits 0 within
// grace.
func (p *proc) term(grace time.Duration) {
	t := p.t
	t.Helper()
	start := time.Now()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(grace):
		t.Fatalf("%s did not exit within %s of SIGTERM:\n%s", p.Name, grace, p.Tail(30))
	}
	t.Logf("%s exited %s after SIGTERM: %v", p.Name, time.Since(start).Round(time.Millisecond), p.Err())
	if err := p.Err(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Errorf("%s exit code %d after SIGTERM, want 0:\n%s", p.Name, ee.ExitCode(), p.Tail(30))
		} else {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}

// waitLog waits until the process log matches re, and returns the match.
func (p *proc) waitLog(re *regexp.Regexp, timeout time.Duration) []string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := p.WaitLog(ctx, re)
	if err != nil {
		p.t.Fatalf("%v:\n%s", err, p.Tail(30))
	}
	return m
}

// startBroker starts `onceflight broker` on a free port with a fresh data
// directory and returns its address once it accepts connections.
//
// With ONCEFLIGHT_TEST_BROKER set it starts that real broker in a container
// instead (internal/brokertest; skipped without Docker): the chaos tests
// then meet Kafka's or Redpanda's own fencing and transactions.
func startBroker(t *testing.T) string {
	t.Helper()
	if os.Getenv(brokertest.EnvImage) != "" {
		return strings.Join(brokertest.Start(t), ",")
	}
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

// serveOpts are the parameters of one `onceflight serve`; zero fields take
// the defaults named.
type serveOpts struct {
	brokers, config, executorID string
	dataDir                     string        // "": a fresh directory
	httpAddr                    string        // "": any free port (read from the log)
	group                       string        // "": defaultGroup
	partitions                  int           // 0: numPartitions
	session                     time.Duration // 0: 6s
	extra                       []string      // more flags
	noWait                      bool          // return once HTTP is up, not waiting for /readyz
	binary                      string        // "": this build (bin)
}

var httpAddrRe = regexp.MustCompile(`executor starting.*http=(\S+)`)

// startServe starts `onceflight serve` and returns once its HTTP server is
// up and (unless noWait) /readyz answers 200: group joined, partitions
// restored.
func startServe(t *testing.T, o serveOpts) *proc {
	t.Helper()
	dataDir, httpAddr, group := o.dataDir, o.httpAddr, o.group
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	if httpAddr == "" {
		httpAddr = "127.0.0.1:0"
	}
	if group == "" {
		group = defaultGroup
	}
	partitions, session := o.partitions, o.session
	if partitions == 0 {
		partitions = numPartitions
	}
	if session == 0 {
		session = 6 * time.Second
	}
	binary := o.binary
	if binary == "" {
		binary = bin
	}
	p := startProcOf(t, binary, "serve-"+o.executorID, append([]string{
		"serve", "--brokers", o.brokers, "--config", o.config, "--data-dir", dataDir,
		"--http", httpAddr, "--group", group, "--partitions", strconv.Itoa(partitions),
		"--session-timeout", session.String(), "--executor-id", o.executorID}, o.extra...)...)
	p.httpAddr = p.waitLog(httpAddrRe, 60*time.Second)[1]
	if !o.noWait {
		waitReady(t, p, 90*time.Second)
	}
	return p
}

// waitReady polls GET /readyz until it answers 200.
func waitReady(t *testing.T, p *proc, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := proctest.WaitReady(ctx, p.Proc, p.httpAddr, 100*time.Millisecond); err != nil {
		t.Fatalf("%v:\n%s", err, p.Tail(30))
	}
}

// metric scrapes p's /metrics and returns the sum of every series of name
// whose labels contain the substring labels ("" for all), and whether there
// was one.
func (p *proc) metric(name, labels string) (sum float64, found bool, err error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || !strings.Contains(line, labels) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("metrics line %q: %w", line, err)
		}
		sum, found = sum+v, true
	}
	return sum, found, sc.Err()
}

// ---------------------------------------------------------------------------
// The actions file.

// action is one entry of the actions file.
type action struct {
	name, connector              string
	url, confirmURL, effectsFile string
	timeout, confirmTimeout      time.Duration
	maxAttempts                  int
	idempotentByKey              bool
	giveUpAfter                  time.Duration
}

// writeConfig writes the actions file (with reconcile.every when not "")
// and returns its path.
func writeConfig(t *testing.T, reconcileEvery string, actions ...action) string {
	t.Helper()
	var b strings.Builder
	if reconcileEvery != "" {
		fmt.Fprintf(&b, "reconcile:\n  every: %s\n", reconcileEvery)
	}
	b.WriteString("actions:\n")
	for _, a := range actions {
		fmt.Fprintf(&b, "  %s:\n    connector: %s\n", a.name, a.connector)
		for _, kv := range [][2]string{{"url", a.url}, {"confirm_url", a.confirmURL}, {"effects_file", a.effectsFile}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, "    %s: %s\n", kv[0], kv[1])
			}
		}
		if a.idempotentByKey {
			b.WriteString("    idempotent_by_key: true\n")
		}
		if a.timeout != 0 {
			fmt.Fprintf(&b, "    timeout: %s\n", a.timeout)
		}
		if a.giveUpAfter != 0 {
			fmt.Fprintf(&b, "    give_up_after: %s\n", a.giveUpAfter)
		}
		if a.maxAttempts != 0 {
			fmt.Fprintf(&b, "    max_attempts: %d\n", a.maxAttempts)
		}
		if a.confirmTimeout != 0 {
			fmt.Fprintf(&b, "    confirm_timeout: %s\n", a.confirmTimeout)
		}
	}
	path := filepath.Join(t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// noopConfig writes an actions file with the noop action recording its
// effects, and returns the config path and the effects file path.
func noopConfig(t *testing.T) (cfg, effects string) {
	t.Helper()
	effects = filepath.Join(t.TempDir(), "effects.log")
	cfg = writeConfig(t, "", action{name: testAction, connector: "noop", effectsFile: effects, timeout: 500 * time.Millisecond})
	return cfg, effects
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

// ---------------------------------------------------------------------------
// Commands.

// command is one command a test produces.
type command struct {
	id, key, entity string
	action          string // "": testAction
	data            string // "": {"key":<key>}
	traceparent     string
	structured      bool // structured CloudEvents mode, else binary
	kcatCRC         bool // kcatProduce: kcat's default (CRC32) partitioner, else murmur2
	repeat          bool // repeats the key (so the entity and data) of an earlier command
}

func (c command) actionName() string {
	if c.action == "" {
		return testAction
	}
	return c.action
}

func (c command) dataJSON() string {
	if c.data == "" {
		return fmt.Sprintf(`{"key":%q}`, c.key)
	}
	return c.data
}

// commandRecord encodes c for the commands topic, keyed by the entity
// (kgo's default partitioner: murmur2).
func commandRecord(t *testing.T, c command) *kgo.Record {
	t.Helper()
	mode := schemas.Binary
	if c.structured {
		mode = schemas.Structured
	}
	rec, err := schemas.EncodeCommand(schemas.Command{
		ID:             c.id,
		Source:         "e2e",
		Type:           c.actionName(),
		Subject:        c.entity,
		IdempotencyKey: c.key,
		TraceParent:    c.traceparent,
		Data:           json.RawMessage(c.dataJSON()),
	}, mode)
	if err != nil {
		t.Fatalf("encode %s: %v", c.id, err)
	}
	rec.Topic = topicCommands
	rec.Key = []byte(c.entity)
	return rec
}

// kcatPath returns kcat's path or skips the test.
func kcatPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed: apt-get install -y kcat")
	}
	return p
}

// runKcat runs kcat with stdin and returns its stdout.
func runKcat(t *testing.T, kcat, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := runCmd(t, kcat, stdin, args...)
	if code != 0 {
		t.Fatalf("kcat %s: exit %d\nstderr: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// kcatProduce produces c with kcat, in c's CloudEvents mode, keyed by the
// entity.
func kcatProduce(t *testing.T, kcat, brokers string, c command) {
	t.Helper()
	args := []string{"-P", "-b", brokers, "-t", topicCommands, "-k", c.entity}
	var value string
	if c.structured {
		args = append(args, "-H", "content-type=application/cloudevents+json")
		tp := ""
		if c.traceparent != "" {
			tp = fmt.Sprintf(`,"traceparent":%q`, c.traceparent)
		}
		value = fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"kcat","type":%q,"subject":%q,"idempotencykey":%q%s,"data":%s}`,
			c.id, c.actionName(), c.entity, c.key, tp, c.dataJSON())
	} else {
		args = append(args, "-H", "ce_specversion=1.0", "-H", "ce_id="+c.id, "-H", "ce_source=kcat",
			"-H", "ce_type="+c.actionName(), "-H", "ce_subject="+c.entity, "-H", "ce_idempotencykey="+c.key,
			"-H", "content-type=application/json")
		if c.traceparent != "" {
			args = append(args, "-H", "ce_traceparent="+c.traceparent)
		}
		value = c.dataJSON()
	}
	if !c.kcatCRC {
		args = append(args, "-X", "partitioner=murmur2_random")
	}
	runKcat(t, kcat, value+"\n", args...)
}

// planStream makes n commands over the given number of entities, binary
// and structured mode in turn; about a quarter repeat the key (and so the
// entity and data) of an earlier one.
func planStream(prefix string, n, entities int) []command {
	var cmds []command
	var keys []command
	for i := range n {
		c := command{id: fmt.Sprintf("%s-cmd-%04d", prefix, i), structured: i%2 == 1}
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

// fromList is a producer's stream of the commands of a list.
func fromList(cmds []command) func(int) (command, bool) {
	return func(i int) (command, bool) {
		if i >= len(cmds) {
			return command{}, false
		}
		return cmds[i], true
	}
}

// producer produces the commands of a stream in the background, one every
// pace (synchronously: sent counts acknowledged commands), never past its
// limit, so that the test decides where in the stream its faults land.
type producer struct {
	t           *testing.T
	cl          *kgo.Client
	sent, limit atomic.Int64
	stopc, done chan struct{}
	stopOnce    sync.Once
	started     time.Time

	mu   sync.Mutex
	cmds []command // acknowledged, in order
	err  error
}

const noLimit = int64(1) << 62

// startProducer produces next(0), next(1), ... until next reports the end,
// stop or finish, at most limit commands before allow raises it.
func startProducer(t *testing.T, brokers string, next func(int) (command, bool), pace time.Duration, limit int64) *producer {
	t.Helper()
	pr := &producer{t: t, cl: newClient(t, brokers, kgo.ProducerLinger(0)),
		stopc: make(chan struct{}), done: make(chan struct{}), started: time.Now()}
	pr.limit.Store(limit)
	t.Cleanup(func() { pr.stop(); <-pr.done })
	go func() {
		defer close(pr.done)
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for i := 0; ; i++ {
			for int64(i) >= pr.limit.Load() {
				select {
				case <-pr.stopc:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			c, ok := next(i)
			if !ok {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := pr.cl.ProduceSync(ctx, commandRecord(t, c)).FirstErr()
			cancel()
			pr.mu.Lock()
			if err != nil {
				pr.err = fmt.Errorf("produce %s: %w", c.id, err)
				pr.mu.Unlock()
				return
			}
			pr.cmds = append(pr.cmds, c)
			pr.mu.Unlock()
			pr.sent.Add(1)
			select {
			case <-pr.stopc:
				return
			case <-tick.C:
			}
		}
	}()
	return pr
}

func (pr *producer) stop() { pr.stopOnce.Do(func() { close(pr.stopc) }) }

// allow lets the producer go on up to n commands in all.
func (pr *producer) allow(n int64) { pr.limit.Store(n) }

// wait waits until at least n commands were produced.
func (pr *producer) wait(n int64) {
	t := pr.t
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for pr.sent.Load() < n {
		select {
		case <-pr.done:
			pr.mu.Lock()
			err := pr.err
			pr.mu.Unlock()
			t.Fatalf("producer stopped after %d of %d commands: %v", pr.sent.Load(), n, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d commands produced", pr.sent.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finish runs a finite stream to its end (lifting the limit), or stops an
// endless one, and returns the commands produced.
func (pr *producer) finish(endless bool) []command {
	t := pr.t
	t.Helper()
	if endless {
		pr.stop()
	} else {
		pr.allow(noLimit)
	}
	select {
	case <-pr.done:
	case <-time.After(120 * time.Second):
		t.Fatalf("producer did not finish: %d sent", pr.sent.Load())
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.err != nil {
		t.Fatalf("producer: %v", pr.err)
	}
	t.Logf("produced %d commands in %s", len(pr.cmds), time.Since(pr.started).Round(time.Millisecond))
	return append([]command(nil), pr.cmds...)
}

// ---------------------------------------------------------------------------
// Outcomes.

// outcome is an outcome event as published (structured CloudEvent JSON),
// with the record fields the tests check.
type outcome struct {
	ID             string `json:"id"`
	Type           string `json:"type"`
	Subject        string `json:"subject"`
	IdempotencyKey string `json:"idempotencykey"`
	CausationID    string `json:"causationid"`
	Replayed       bool   `json:"replayed"`
	Data           struct {
		IdempotencyKey string          `json:"idempotency_key"`
		Entity         string          `json:"entity"`
		Action         string          `json:"action"`
		Status         string          `json:"status"`
		Hash           string          `json:"hash"`
		Attempts       int             `json:"attempts"`
		Executor       string          `json:"executor"`
		Epoch          int64           `json:"epoch"`
		FencingToken   int64           `json:"fencing_token"`
		Result         json.RawMessage `json:"result"`
		Error          *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Command struct {
			ID        string `json:"id"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
		} `json:"command"`
		Resolution *struct {
			By     string    `json:"by"`
			At     time.Time `json:"at"`
			Reason string    `json:"reason"`
			As     string    `json:"as"`
		} `json:"resolution"`
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

func (o outcome) errCode() string {
	if o.Data.Error == nil {
		return ""
	}
	return o.Data.Error.Code
}

// byCommand groups outcomes by the command they answer.
func byCommand(outs []outcome) map[string][]outcome {
	by := map[string][]outcome{}
	for _, o := range outs {
		by[o.CausationID] = append(by[o.CausationID], o)
	}
	return by
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

// outcomeSource reads every committed outcome: with franz-go (fromKafka)
// or with kcat (fromKcat).
type outcomeSource func(t *testing.T) []outcome

// readOutcomes returns every committed outcome event, read with franz-go.
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

func fromKafka(brokers string) outcomeSource {
	return func(t *testing.T) []outcome { t.Helper(); return readOutcomes(t, brokers) }
}

func fromKcat(kcat, brokers string) outcomeSource {
	return func(t *testing.T) []outcome { t.Helper(); return kcatOutcomes(t, kcat, brokers) }
}

// waitOutcomes polls src until every id in want has an outcome for which
// accept (nil: any) holds, and returns all outcomes read by the last poll.
func waitOutcomes(t *testing.T, src outcomeSource, want []string, accept func(outcome) bool, timeout time.Duration) []outcome {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		all := src(t)
		seen := map[string]bool{}
		for _, o := range all {
			if accept == nil || accept(o) {
				seen[o.CausationID] = true
			}
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
		time.Sleep(250 * time.Millisecond)
	}
}

func commandIDs(cmds []command) []string {
	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.id
	}
	return ids
}

// checkOpts says what checkOutcomes accepts.
type checkOpts struct {
	// republished: the same outcome id may be published more than once
	// (after a crash); counted and logged.
	republished bool
	// statuses are the statuses a command may end with; nil: succeeded
	// and unresolved.
	statuses []string
	// explain adds detail to an error about a command (nil: none).
	explain func(c command) string
}

// checked is what checkOutcomes found, for the further checks.
type checked struct {
	byCmd       map[string][]outcome
	first       map[string]outcome         // key -> the outcome of its first command
	entity      map[string]string          // key -> entity
	statuses    map[string]map[string]bool // key -> statuses of its outcomes
	republished int
	repeats     int
}

func describe(got []outcome) string {
	var d []string
	for _, o := range got {
		d = append(d, fmt.Sprintf("%s(%s replayed=%v) %s", o.ID, o.Data.Status, o.Replayed, o.Raw))
	}
	return strings.Join(d, "\n    ")
}

// checkOutcomes checks the outcomes of a stream of commands:
//   - every command id has exactly one distinct outcome id (republications of
//     the same id are counted, and allowed only with o.republished);
//   - the outcome names the command's key and entity, its type its status,
//     and the status is one of o.statuses;
//   - every command of a repeated key after the first got replayed:true.
func checkOutcomes(t *testing.T, cmds []command, outs []outcome, o checkOpts) checked {
	t.Helper()
	allowed := map[string]bool{"succeeded": true, "unresolved": true}
	if o.statuses != nil {
		allowed = map[string]bool{}
		for _, s := range o.statuses {
			allowed[s] = true
		}
	}
	explain := func(c command) string {
		if o.explain == nil {
			return ""
		}
		return o.explain(c)
	}
	ck := checked{byCmd: byCommand(outs), first: map[string]outcome{}, entity: map[string]string{}, statuses: map[string]map[string]bool{}}
	firstOf := map[string]string{} // key -> first command id
	for _, c := range cmds {
		if c.repeat {
			ck.repeats++
		}
		got := ck.byCmd[c.id]
		if len(got) == 0 {
			t.Errorf("command %s (key %s): no outcome%s", c.id, c.key, explain(c))
			continue
		}
		ids := map[string]bool{}
		if ck.statuses[c.key] == nil {
			ck.statuses[c.key] = map[string]bool{}
		}
		for _, oc := range got {
			ids[oc.ID] = true
			ck.statuses[c.key][oc.Data.Status] = true
			if oc.IdempotencyKey != c.key || oc.Data.IdempotencyKey != c.key || oc.Subject != c.entity {
				t.Errorf("command %s: outcome %s has key %q/%q subject %q, want %q %q", c.id, oc.ID, oc.IdempotencyKey, oc.Data.IdempotencyKey, oc.Subject, c.key, c.entity)
			}
			if oc.Type != "onceflight.execution."+oc.Data.Status {
				t.Errorf("command %s: outcome %s has type %s and status %s", c.id, oc.ID, oc.Type, oc.Data.Status)
			}
		}
		if len(ids) != 1 {
			t.Errorf("command %s (key %s): %d distinct outcome ids:\n    %s", c.id, c.key, len(ids), describe(got))
		}
		ck.republished += len(got) - 1
		oc := got[0]
		ck.entity[c.key] = c.entity
		if !allowed[oc.Data.Status] {
			t.Errorf("command %s (key %s, entity %s): status %s, error %+v:\n    %s%s", c.id, c.key, c.entity, oc.Data.Status, oc.Data.Error, describe(got), explain(c))
		}
		if _, seen := firstOf[c.key]; seen {
			if !oc.Replayed {
				t.Errorf("command %s repeats key %s of %s but its outcome has replayed=false:\n    %s", c.id, c.key, firstOf[c.key], describe(got))
			}
		} else {
			firstOf[c.key] = c.id
			ck.first[c.key] = oc
		}
	}
	if ck.republished > 0 {
		t.Logf("%d republished outcome records (same outcome id as an earlier one)", ck.republished)
		if !o.republished {
			t.Errorf("%d duplicate outcome records", ck.republished)
		}
	}
	return ck
}

// checkEffects checks the effects per key (from countEffects or the
// service): a key has at most one effect, exactly one unless it is
// unresolved, and no effect names a key no command had.
func checkEffects(t *testing.T, ck checked, effects map[string]int, explain func(key string) string) (unresolved int) {
	t.Helper()
	if explain == nil {
		explain = func(string) string { return "" }
	}
	for key, st := range ck.statuses {
		n := effects[key]
		switch {
		case n > 1:
			t.Errorf("key %s (entity %s, status %v): executed %d times, want at most 1%s", key, ck.entity[key], st, n, explain(key))
		case !st["unresolved"] && n != 1:
			t.Errorf("key %s (entity %s, status %v): executed %d times, want exactly 1%s", key, ck.entity[key], st, n, explain(key))
		}
		if st["unresolved"] {
			unresolved++
			t.Logf("key %s (entity %s) is unresolved; executions: %d", key, ck.entity[key], n)
		}
	}
	for key := range effects {
		if _, ok := ck.statuses[key]; !ok {
			t.Errorf("an effect names key %s that no command had", key)
		}
	}
	return unresolved
}

// checkStream checks the outcomes of a noop stream and its effects file.
func checkStream(t *testing.T, cmds []command, outs []outcome, effectsPath string, republished bool) {
	t.Helper()
	ck := checkOutcomes(t, cmds, outs, checkOpts{republished: republished})
	unresolved := checkEffects(t, ck, countEffects(t, effectsPath), nil)
	t.Logf("checked %d commands (%d repeats) over %d keys, %d outcome records, %d unresolved keys",
		len(cmds), ck.repeats, len(ck.first), len(outs), unresolved)
}

// noopRun is one executor running the noop action, with a planned stream
// produced into it at gatedPace, at most limit commands until allowed more.
type noopRun struct {
	t                *testing.T
	brokers, effects string
	opts             serveOpts // to start the executor again
	serve            *proc
	cmds             []command
	prod             *producer
}

// gatedPace is the pace of the planned streams, whose faults land at given
// counts.
const gatedPace = 15 * time.Millisecond

// startNoopRun starts executor id on brokers, waits until it is ready, and
// starts producing planStream(prefix, total, entities).
func startNoopRun(t *testing.T, brokers, id, prefix string, total, entities int, limit int64) *noopRun {
	t.Helper()
	r := &noopRun{t: t, brokers: brokers}
	var cfg string
	cfg, r.effects = noopConfig(t)
	r.opts = serveOpts{brokers: brokers, config: cfg, dataDir: t.TempDir(), executorID: id}
	r.serve = startServe(t, r.opts)
	r.cmds = planStream(prefix, total, entities)
	r.prod = startProducer(t, brokers, fromList(r.cmds), gatedPace, limit)
	return r
}

// restart starts the executor again (same data dir), waiting for /readyz
// unless noWait.
func (r *noopRun) restart(noWait bool) {
	r.t.Helper()
	o := r.opts
	o.noWait = noWait
	r.serve = startServe(r.t, o)
}

// finish produces the rest of the stream, waits for every outcome, and
// checks outcomes, effects (checkStream) and the records (audit).
func (r *noopRun) finish(timeout time.Duration, republished bool) {
	t := r.t
	t.Helper()
	r.prod.finish(false)
	t.Logf("all %d commands produced", len(r.cmds))
	start := time.Now()
	outs := waitOutcomes(t, fromKafka(r.brokers), commandIDs(r.cmds), nil, timeout)
	t.Logf("all outcomes present %s after the last command", time.Since(start).Round(time.Millisecond))
	checkStream(t, r.cmds, outs, r.effects, republished)
	audit(t, r.brokers, defaultGroup)
	if r.serve.Exited() {
		t.Errorf("serve exited: %v\n%s", r.serve.Err(), r.serve.Tail(30))
	}
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
