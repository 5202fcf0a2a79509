// Command onceflight-bench is Onceflight's end-to-end benchmark (issue 8,
// "the project owns its comparison"): on one broker and one machine it
// runs a raw design-minimal Kafka + Pebble pipeline (of a new key and of
// a repeat) and then the real executor (`onceflight serve`, a separate
// process) over the same kind of backlog, and prints one table of rates, ratios, CPU per command, peak
// RSS, latency percentiles and the audit verdict of the topics each run
// left. Ratios measured in one run are what compare across machines;
// absolute figures move with the machine and its neighbours.
//
//	make bench-e2e                       # build, then run every default phase
//	make bench-e2e BENCH_ARGS='-n 5000'  # a quick run
//
// It is a program, not a test, so that it measures the binary a user runs
// (its own process, CPU and memory) and never runs in `make test`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/proctest"
	"github.com/onceflight/onceflight/kafkaconf"
	"github.com/onceflight/onceflight/schemas"
)

// allPhases in the order they run; later phases reuse what earlier ones
// left (the executor's data dir, its final keys, the journal).
var allPhases = []string{"raw", "executor", "repeats", "latency", "http", "hot", "index", "restore", "audit", "executors"}

// bench is one run's configuration and shared clients.
type bench struct {
	bin        string
	dir        string
	brokers    []string
	prefix     string // of every topic, group and transactional id of the run
	topics     schemas.Topics
	group      string
	partitions int
	entities   int
	inflight   int
	// randomKeys: idempotency keys in no order (-random-keys).
	randomKeys bool
	data       []byte
	configPath string
	serveArgs  []string
	stall      time.Duration
	audit      bool

	// brokerPID is the broker process the run started, 0 with -brokers:
	// its CPU per command is reported next to the executor's.
	brokerPID int

	prod *kgo.Client // backlogs: batched, default linger
	lat  *kgo.Client // one at a time: linger 0
	adm  *kadm.Client

	rep *report
}

// problem records something the reader of the table must know about
// (errors, audit failures, stalls) and prints it at once as well.
func (b *bench) problem(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "problem:", s)
	b.rep.Problems = append(b.rep.Problems, s)
}

func (b *bench) kafkaArgs() []string {
	return []string{
		"--brokers", strings.Join(b.brokers, ","),
		"--commands-topic", b.topics.Commands,
		"--outcomes-topic", b.topics.Outcomes,
		"--journal-topic", b.topics.Journal,
		"--deadletter-topic", b.topics.Deadletter,
	}
}

type options struct {
	phases        string
	n, rawN       int
	rawRepeatN    int
	rawPasses     int
	httpN         int
	rawPoll       int
	entities      int
	randomKeys    bool
	partitions    int
	inflight      int
	httpInflight  int
	httpDelay     time.Duration
	dataBytes     int
	latSamples    int
	latSettle     time.Duration
	restoreTarget int64
	restoreWait   time.Duration
	brokers       string
	bin           string
	dir           string
	keep          bool
	output        string
	mdPath        string
	prefix        string
	serveArgs     string
	stall         time.Duration
	timeout       time.Duration
	audit         bool
	maxExecutors  int
	executorsN    int
	indexKeys     int
	hotN, hotCold int
}

func main() {
	var o options
	fs := flag.NewFlagSet("onceflight-bench", flag.ExitOnError)
	fs.StringVar(&o.phases, "phases", "raw,executor,repeats,latency,http,hot,index,restore,audit", "phases to run, comma-separated, from "+strings.Join(allPhases, ","))
	fs.IntVar(&o.n, "n", 50_000, "commands in the executor's and the repeats' backlog")
	fs.IntVar(&o.rawN, "raw-n", 0, "inputs of the raw pipeline (0: 4 × -n, at least 200 000: it is fast, and a longer run is steadier)")
	fs.IntVar(&o.rawRepeatN, "raw-repeat-n", 0, "inputs of the raw repeat floor, each looked up once in an index of as many records (0: -n, the repeats phase's size)")
	fs.IntVar(&o.rawPasses, "raw-repeat-passes", 3, "passes of the raw repeat floor over its inputs, each over its index reopened cold; the row adds them up")
	fs.IntVar(&o.rawPoll, "raw-poll", 0, "records per poll (and so per transaction) of the raw pipeline; 0: whatever one PollFetches returns (the strongest baseline); 500 is the executor's MaxPollRecords")
	fs.IntVar(&o.httpN, "http-n", 0, "commands of the http phase (0: -n)")
	fs.IntVar(&o.entities, "entities", 10_000, "distinct entities (Kafka keys) the commands are spread over")
	fs.BoolVar(&o.randomKeys, "random-keys", false, "idempotency keys in no order (PREFIX-<16 hex digits>, a bijection of the command's number) instead of PREFIX-<number>: the dedupe index stores records key-first, so numbered keys land next to each other and compact almost for free, which random keys (UUIDs, hashes) do not")
	fs.IntVar(&o.partitions, "partitions", 12, "partitions of every topic")
	fs.IntVar(&o.inflight, "inflight", 64, "serve --max-inflight for the noop phases (serve's default)")
	fs.IntVar(&o.httpInflight, "http-inflight", 1024, "serve --max-inflight for the http phase")
	fs.DurationVar(&o.httpDelay, "http-delay", 20*time.Millisecond, "how long the http phase's server takes per request")
	fs.IntVar(&o.dataBytes, "data-bytes", 200, "size of each command's data (a JSON object)")
	fs.IntVar(&o.latSamples, "latency-samples", 300, "one-at-a-time samples of each kind in the latency phase")
	fs.DurationVar(&o.latSettle, "latency-settle", 0, "before the latency samples, sync(2) and wait at most this long for the dirty page cache to fall under 32 MB (0: start at once); the raw round trip's note gives the state either way")
	fs.Int64Var(&o.restoreTarget, "restore-records", 200_000, "journal offsets the restore phase catches up (filled with more noop commands if earlier phases wrote fewer; issue 8 asks for 1 000 000)")
	fs.DurationVar(&o.restoreWait, "restore-wait", 10*time.Minute, "how long the restore phase waits for the empty executor to become ready")
	fs.StringVar(&o.brokers, "brokers", "", "use these Kafka brokers (host:port,...) instead of starting the embedded broker (onceflight broker)")
	fs.StringVar(&o.bin, "bin", "bin/onceflight", "the onceflight binary to benchmark (make bench-e2e builds it)")
	fs.StringVar(&o.dir, "dir", "", "working directory for broker and executor data and logs (default: a new temp dir)")
	fs.BoolVar(&o.keep, "keep", false, "keep the working directory (logs, audit reports, data) after the run")
	fs.StringVar(&o.output, "o", "text", "output: text, json or markdown")
	fs.StringVar(&o.prefix, "prefix", "", "topic, group and transactional id prefix (default ofb-<unix time>.); with -brokers, an earlier run's prefix reuses its topics, e.g. to restore a journal filled before")
	fs.StringVar(&o.mdPath, "md", "", "also write the table as markdown to this file (for BENCHMARKS.md)")
	fs.StringVar(&o.serveArgs, "serve-args", "", "extra flags for every serve, space-separated (e.g. '--pprof 127.0.0.1:6060' once serve has it)")
	fs.DurationVar(&o.stall, "stall", 60*time.Second, "fail a phase when no outcome arrives for this long")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "bound on the whole run")
	fs.BoolVar(&o.audit, "audit", true, "run onceflight's audit command after every executor phase")
	fs.IntVar(&o.maxExecutors, "max-executors", 3, "the executors phase (not in the defaults: make bench-scale) drains a backlog with 1, 2, … this many serve processes in one group")
	fs.IntVar(&o.executorsN, "executors-n", 0, "commands of each executors run (0: -n)")
	fs.IntVar(&o.indexKeys, "index-keys", 200_000, "keys of the index phase's dedupe index (issue 24 asks for 10 M: make bench-scale)")
	fs.IntVar(&o.hotN, "hot-n", 10_000, "queued commands of the hot phase's hot entity")
	fs.IntVar(&o.hotCold, "hot-others", 40, "commands of other entities of the hot entity's partition, queued behind its backlog")
	if len(os.Args) > 1 && os.Args[1] == indexChildFlag {
		if err := runIndexChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "onceflight-bench:", err)
			os.Exit(1)
		}
		return
	}
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "onceflight-bench:", err)
		os.Exit(1)
	}
}

// parsePhases checks a -phases list. repeats needs the executor phase's
// final keys, so it brings the executor phase with it.
func parsePhases(s string) (map[string]bool, error) {
	set := map[string]bool{}
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(allPhases, p) {
			return nil, fmt.Errorf("-phases: unknown phase %q (want some of %s)", p, strings.Join(allPhases, ","))
		}
		set[p] = true
	}
	if len(set) == 0 {
		return nil, errors.New("-phases: no phase given")
	}
	if set["repeats"] {
		set["executor"] = true
	}
	return set, nil
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	phases, err := parsePhases(o.phases)
	if err != nil {
		return err
	}
	if !slices.Contains([]string{"text", "json", "markdown"}, o.output) {
		return fmt.Errorf("-o %q: want text, json or markdown", o.output)
	}
	if o.n < 1 || o.entities < 1 || o.partitions < 1 || o.inflight < 1 || o.httpInflight < 1 || o.latSamples < 1 || o.rawPoll < 0 || o.rawPasses < 1 {
		return errors.New("-n, -entities, -partitions, -inflight, -http-inflight, -latency-samples and -raw-repeat-passes must be positive, -raw-poll not negative")
	}
	if o.rawN == 0 {
		o.rawN = max(4*o.n, 200_000)
	}
	if o.rawRepeatN <= 0 {
		o.rawRepeatN = o.n
	}
	if o.httpN == 0 {
		o.httpN = o.n
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return fmt.Errorf("-bin: %w", err)
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("-bin %s: %w (run `make build` first, or use `make bench-e2e`)", o.bin, err)
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "onceflight-bench-"); err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-dir: %w", err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "working directory (kept):", dir)
	}

	host, _ := os.Hostname()
	b := &bench{
		bin: bin, dir: dir, partitions: o.partitions, entities: o.entities, randomKeys: o.randomKeys, inflight: o.inflight,
		data: benchData(o.dataBytes), serveArgs: strings.Fields(o.serveArgs), stall: o.stall, audit: o.audit,
		rep: &report{Started: time.Now().UTC(), Commit: gitCommit(), Host: host, CPUs: runtime.NumCPU(), Args: strings.Join(os.Args[1:], " ")},
	}
	b.prefix = o.prefix
	if b.prefix == "" {
		b.prefix = fmt.Sprintf("ofb-%d.", time.Now().Unix())
	}
	b.topics = schemas.Topics{
		Commands: b.prefix + "commands", Outcomes: b.prefix + "outcomes",
		Journal: b.prefix + "journal", Deadletter: b.prefix + "deadletter",
	}
	b.group = b.prefix + "executors"

	if o.brokers != "" {
		b.brokers = strings.Split(o.brokers, ",")
	} else {
		addr, err := proctest.FreeAddr()
		if err != nil {
			return err
		}
		brk, err := proctest.Start(dir, "broker", bin, "broker", "--listen", addr, "--data-dir", filepath.Join(dir, "broker"), "--partitions", fmt.Sprint(o.partitions))
		if err != nil {
			return err
		}
		defer func() {
			if err := brk.Stop(30 * time.Second); err != nil {
				fmt.Fprintln(os.Stderr, "broker:", err)
			}
		}()
		if err := proctest.WaitTCP(ctx, brk, addr); err != nil {
			return err
		}
		b.brokers = []string{addr}
		b.brokerPID = brk.Pid()
	}
	b.rep.Brokers = strings.Join(b.brokers, ",")
	if o.brokers == "" {
		b.rep.Brokers += " (onceflight broker, a separate process)"
	}

	if b.prod, err = kgo.NewClient(kgo.SeedBrokers(b.brokers...), kafkaconf.WireCompression()); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer b.prod.Close()
	if b.lat, err = kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ProducerLinger(0), kafkaconf.WireCompression()); err != nil {
		return fmt.Errorf("latency producer: %w", err)
	}
	defer b.lat.Close()
	b.adm = kadm.NewClient(b.prod)

	srv, posts := slowServer(o.httpDelay)
	defer srv.Close()
	b.configPath = filepath.Join(dir, "onceflight.yaml")
	yaml := fmt.Sprintf("actions:\n  bench.noop:\n    connector: noop\n  bench.http:\n    connector: http\n    url: %s/effects\n    timeout: 2s\n", srv.URL)
	if err := os.WriteFile(b.configPath, []byte(yaml), 0o644); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := b.createTopics(ctx); err != nil {
		return err
	}

	execDir := filepath.Join(dir, "executor")
	var raw rawResult
	var rawRep rawRepeatResult
	var exec, rep serveRun
	perCmd := 0.0

	if phases["raw"] {
		fmt.Fprintf(os.Stderr, "raw: %d inputs\n", o.rawN)
		if raw, err = b.runRaw(ctx, o.rawN, o.rawPoll); err != nil {
			b.problem("raw: %v", err)
		}
		r := row{Phase: "raw", Measure: "inputs/s (read 1, write 3, txn + synced Pebble batch per poll)", Value: rate(raw.inputs, raw.elapsed), Unit: "/s",
			CPUPerCmd: perInput(raw.cpu, raw.inputs), Note: fmt.Sprintf("%d inputs, %d polls (%.0f per poll), in-process%s", raw.inputs, raw.polls, float64(raw.inputs)/float64(max(1, raw.polls)), brokerNote(raw.brokerCPU, raw.inputs))}
		b.rep.Rows = append(b.rep.Rows, r)
		fmt.Fprintf(os.Stderr, "raw: repeats, %d inputs, %d passes\n", o.rawRepeatN, o.rawPasses)
		if rawRep, err = b.runRawRepeat(ctx, o.rawRepeatN, o.rawPoll, o.rawPasses); err != nil {
			b.problem("raw repeats: %v", err)
		}
		b.rep.Rows = append(b.rep.Rows, rawRepeatRow(rawRep, perInput(raw.cpu, raw.inputs)))
	}
	rawRate := rate(raw.inputs, raw.elapsed)

	if phases["executor"] {
		fmt.Fprintf(os.Stderr, "executor: backlog of %d new commands\n", o.n)
		exec, err = b.drain(ctx, "executor", cmdSpec{action: "bench.noop", idPrefix: "n", keyPrefix: "k", n: o.n}, execDir, o.inflight)
		if err != nil {
			b.problem("executor: %v", err)
		}
		if exec.n > 0 && exec.journal > 0 {
			perCmd = float64(exec.journal) / float64(exec.n)
		}
		r := serveRow("executor", "new keys, noop: cmds/s", exec)
		r.Vs, r.Ratio = "raw", ratio(exec.rate(), rawRate)
		if r.Ratio > 0 {
			goalAtLeast(&r, r.Ratio, 0.5, "0.5×")
		}
		r.Note = fmt.Sprintf("%d cmds, --max-inflight %d, ready %.1fs after start, %.2f journal offsets/cmd%s", exec.n, o.inflight, exec.readyAfter.Seconds(), perCmd, brokerNote(exec.brokerCPU, exec.n))
		b.rep.Rows = append(b.rep.Rows, r)
		if c := exec.cpuPerCmd(); c > 0 {
			cr := row{Phase: "executor", Measure: "new keys, noop: CPU per command", Value: c, Unit: "µs", Vs: "raw", Ratio: ratio(c, perInput(raw.cpu, raw.inputs)),
				Note: "serve's user+sys CPU over the drain / commands; the raw pipeline's per input is the floor"}
			goalAtMost(&cr, c, 25, "25 µs")
			b.rep.Rows = append(b.rep.Rows, cr)
		}
		// Issue 24: memory must not grow with the backlog. The goal is
		// absolute; run with several -n (scripts/bench-memory.sh) to see
		// that the figure stays flat.
		if rss := exec.rssMB(); rss > 0 {
			m := row{Phase: "executor", Measure: "peak RSS draining the backlog", Value: rss, Unit: "MB",
				Note: fmt.Sprintf("VmHWM of serve over %d queued commands; bounded by --max-buffered, --max-buffered-bytes, --cache-size (docs/memory.md)", exec.n)}
			goalAtMost(&m, rss, 150, "150 MB")
			b.rep.Rows = append(b.rep.Rows, m)
		}
	}

	if phases["repeats"] {
		fmt.Fprintf(os.Stderr, "repeats: backlog of %d commands with final keys\n", o.n)
		rep, err = b.drain(ctx, "repeats", cmdSpec{action: "bench.noop", idPrefix: "r", keyPrefix: "k", n: o.n}, execDir, o.inflight)
		if err != nil {
			b.problem("repeats: %v", err)
		}
		r := serveRow("repeats", "final keys again: cmds/s", rep)
		r.Vs, r.Ratio = "executor", ratio(rep.rate(), exec.rate())
		if r.Ratio > 0 {
			goalAtLeast(&r, r.Ratio, 3, "3×")
		}
		r.Note = fmt.Sprintf("%d cmds, %d replayed%s%s", rep.n, rep.replayed, brokerNote(rep.brokerCPU, rep.n),
			repeatsFloorNote(exec.cpuPerCmd(), rep.cpuPerCmd(), perInput(raw.cpu, raw.inputs), perInput(rawRep.cpu, rawRep.inputs)))
		b.rep.Rows = append(b.rep.Rows, r)
	}

	if phases["latency"] {
		fmt.Fprintf(os.Stderr, "latency: %d samples each\n", o.latSamples)
		lr, err := b.latency(ctx, execDir, o.latSamples, 20, o.latSettle)
		if err != nil {
			b.problem("latency: %v", err)
		}
		b.rep.Rows = append(b.rep.Rows, latencyRows(lr)...)
	}

	if phases["http"] {
		fmt.Fprintf(os.Stderr, "http: %d commands, %s per request, --max-inflight %d\n", o.httpN, o.httpDelay, o.httpInflight)
		before := posts.Load()
		h, err := b.drain(ctx, "http", cmdSpec{action: "bench.http", idPrefix: "h", keyPrefix: "hk", n: o.httpN}, execDir, o.httpInflight)
		if err != nil {
			b.problem("http: %v", err)
		}
		got := posts.Load() - before
		if err == nil && got != int64(o.httpN) {
			b.problem("http: the server saw %d POSTs for %d commands", got, o.httpN)
		}
		ceiling := float64(o.partitions) / o.httpDelay.Seconds()
		r := serveRow("http", fmt.Sprintf("%s connector: cmds/s", o.httpDelay), h)
		r.Vs, r.Ratio = fmt.Sprintf("%.0f/s (1 per partition)", ceiling), ratio(h.rate(), ceiling)
		if h.rate() > 0 && o.httpDelay == 20*time.Millisecond {
			goalAtLeast(&r, h.rate(), 20_000, "20 000/s")
		}
		r.Note = fmt.Sprintf("%d cmds, %d POSTs, --max-inflight %d%s%s", h.n, got, o.httpInflight, brokerNote(h.brokerCPU, h.n), h.steadyNote())
		b.rep.Rows = append(b.rep.Rows, r)
		// The goal is 20 000/s, or where this machine's CPU is what
		// bounds it, at most 1.5× a noop command's CPU.
		if hc, nc := h.cpuPerCmd(), exec.cpuPerCmd(); hc > 0 && nc > 0 {
			cr := row{Phase: "http", Measure: "CPU per command", Value: hc, Unit: "µs", Vs: "noop CPU/cmd", Ratio: ratio(hc, nc),
				Note: "the http goal is met by either row: 20 000/s, or this ratio where CPU-bound"}
			goalAtMost(&cr, cr.Ratio, 1.5, "1.5×")
			b.rep.Rows = append(b.rep.Rows, cr)
		}
	}

	if phases["hot"] {
		fmt.Fprintf(os.Stderr, "hot: %d commands of one entity, then %d of other entities of its partition\n", o.hotN, o.hotCold)
		hr, err := b.hotPhase(ctx, execDir, o.hotN, o.hotCold)
		if err != nil {
			b.problem("hot: %v", err)
		} else {
			b.rep.Rows = append(b.rep.Rows, hotRows(hr)...)
		}
	}

	if phases["index"] {
		fmt.Fprintf(os.Stderr, "index: a dedupe index of %d keys\n", o.indexKeys)
		ir, err := b.indexPhase(ctx, o.indexKeys)
		if err != nil {
			b.problem("index: %v", err)
		} else {
			b.rep.Rows = append(b.rep.Rows, indexRows(ir)...)
		}
	}

	if phases["restore"] {
		fmt.Fprintf(os.Stderr, "restore: %d journal offsets\n", o.restoreTarget)
		rr, fill, err := b.restore(ctx, execDir, o.restoreTarget, perCmd, o.restoreWait)
		if err != nil {
			b.problem("restore: %v", err)
		}
		if fill != nil {
			r := serveRow("restore-fill", "new keys, noop: cmds/s", *fill)
			r.Vs, r.Ratio = "raw", ratio(fill.rate(), rawRate)
			r.Note = fmt.Sprintf("%d cmds to fill the journal (a second executor sample)", fill.n)
			b.rep.Rows = append(b.rep.Rows, r)
		}
		rawRR := rate(rr.rawRecords, rr.rawTime)
		b.rep.Rows = append(b.rep.Rows, row{Phase: "restore", Measure: "raw read of the journal: records/s", Value: rawRR, Unit: "/s",
			Note: fmt.Sprintf("%d records in %.2fs, read_committed", rr.rawRecords, rr.rawTime.Seconds())})
		r := serveRow("restore", "empty data dir → ready: journal records/s", rr.serve)
		r.CPUPerCmd = 0 // per record, not per command: in the note
		r.Value = rate(rr.rawRecords, rr.serve.readyAfter)
		r.Vs, r.Ratio = "raw read", ratio(r.Value, rawRR)
		if r.Ratio > 0 {
			goalAtLeast(&r, r.Ratio, 0.5, "0.5×")
		}
		r.Note = fmt.Sprintf("%d offsets, ready %.2fs after start (slowest partition's catch-up %.2fs), %.1f µs CPU/record", rr.journal, rr.serve.readyAfter.Seconds(), rr.maxTook.Seconds(), perInput(rr.serve.cpu, rr.rawRecords))
		if rr.failures > 0 {
			r.Note += fmt.Sprintf("; %d partition restores failed and were retried", rr.failures)
		}
		b.rep.Rows = append(b.rep.Rows, r)
	}

	if phases["audit"] {
		fmt.Fprintln(os.Stderr, "audit: onceflight audit of the run's topics vs a raw read of them")
		ar, err := b.auditPhase(ctx)
		if err != nil {
			b.problem("audit: %v", err)
		}
		if ar.took > 0 {
			b.rep.Rows = append(b.rep.Rows, auditRows(ar)...)
		}
	}

	if phases["executors"] {
		n := o.executorsN
		if n == 0 {
			n = o.n
		}
		b.rep.Rows = append(b.rep.Rows, b.scaleRows(ctx, o.maxExecutors, n)...)
	}

	if o.mdPath != "" {
		f, err := os.Create(o.mdPath)
		if err != nil {
			return fmt.Errorf("-md: %w", err)
		}
		err = b.rep.writeMarkdown(f)
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("-md: %w", cerr)
		}
		if err != nil {
			return err
		}
	}
	switch o.output {
	case "json":
		return b.rep.writeJSON(stdout)
	case "markdown":
		return b.rep.writeMarkdown(stdout)
	default:
		return b.rep.writeText(stdout)
	}
}

// serveRow is the common part of a row measured on a serve process.
func serveRow(phase, measure string, s serveRun) row {
	return row{Phase: phase, Measure: measure, Value: s.rate(), Unit: "/s",
		CPUPerCmd: s.cpuPerCmd(), RSSMB: s.rssMB(), Log: s.logCell(), Audit: s.audit}
}

// latencyRows are the latency phase's rows: the raw round trip, and new
// and repeated keys against it (p50) and against their own p50 (p99).
func latencyRows(lr latencyRun) []row {
	rawP50, rawP99 := percentile(lr.raw, 50), percentile(lr.raw, 99)
	out := []row{
		{Phase: "latency", Measure: "raw Kafka round trip p50", Value: ms(rawP50), Unit: "ms", Note: fmt.Sprintf("%d samples, produce linger 0 → read_committed%s", len(lr.raw), lr.stateNote())},
		{Phase: "latency", Measure: "raw Kafka round trip p99", Value: ms(rawP99), Unit: "ms"},
		{Phase: "latency", Measure: "serve idle CPU (nothing to do)", Value: 100 * lr.idleCPU, Unit: "% of a core", Note: fmt.Sprintf("over %s before the samples", idleWindow)},
	}
	if lr.idleCPU == 0 && len(lr.raw) > 0 {
		// /proc counts CPU in 10 ms ticks: "-" would read as not measured.
		out[2].Note += fmt.Sprintf("; not one 10 ms tick, i.e. < %.2f %%", 100*float64(10*time.Millisecond)/float64(idleWindow))
	}
	for _, k := range []struct {
		name    string
		ds      []time.Duration
		goal    float64
		label   string
		withLog bool
	}{
		{"new key", lr.fresh, 5, "5×", true},
		{"repeated key", lr.repeat, 3, "3×", false},
	} {
		p50, p99 := percentile(k.ds, 50), percentile(k.ds, 99)
		r50 := row{Phase: "latency", Measure: k.name + " p50", Value: ms(p50), Unit: "ms", Vs: "raw p50", Ratio: ratio(ms(p50), ms(rawP50))}
		if r50.Ratio > 0 {
			goalAtMost(&r50, r50.Ratio, k.goal, k.label)
		}
		r99 := row{Phase: "latency", Measure: k.name + " p99", Value: ms(p99), Unit: "ms", Vs: k.name + " p50", Ratio: ratio(ms(p99), ms(p50))}
		if r99.Ratio > 0 {
			goalAtMost(&r99, r99.Ratio, 2, "2×")
		}
		if k.withLog {
			r50.CPUPerCmd, r50.RSSMB = lr.serve.cpuPerCmd(), lr.serve.rssMB()
			r50.Log, r50.Audit = lr.serve.logCell(), lr.serve.audit
			r50.Note = fmt.Sprintf("%d samples; cpu over new and repeated", len(k.ds))
		}
		out = append(out, r50, r99)
	}
	return out
}

// stateNote is the machine's state for the raw round trip's note: the
// dirty page cache when the samples started (and what -latency-settle did
// before), and the CPU during them; "" when nothing could be read.
func (lr latencyRun) stateNote() string {
	var s string
	if st := lr.settle; st != nil {
		s += fmt.Sprintf("; settled: dirty %.0f → %.0f MB in %.1fs", st.before.mb(), st.after.mb(), st.waited.Seconds())
		if !st.reached {
			s += fmt.Sprintf(" (not under %d MB)", settleLimitKB>>10)
		}
	}
	if d := lr.dirty; d != nil {
		s += fmt.Sprintf("; at the start dirty %.0f MB, writeback %.0f MB", float64(d.DirtyKB)/1024, float64(d.WritebackKB)/1024)
	}
	if lr.machine != "" {
		s += "; during the samples " + lr.machine
	}
	if lr.idlePerSample >= 0 && lr.machine != "" {
		s += fmt.Sprintf(", %.1f CPU idle entries a sample", lr.idlePerSample)
	}
	if lr.probe[0] > 0 && lr.probe[1] > 0 {
		s += fmt.Sprintf("; cpu probe %.2f / %.2f ns a step before / after (thread CPU time)", lr.probe[0], lr.probe[1])
	}
	return s
}

// brokerNote is the broker's CPU per command for a row's note, "" when the
// run did not start the broker.
func brokerNote(cpu time.Duration, n int) string {
	if cpu <= 0 || n == 0 {
		return ""
	}
	return fmt.Sprintf("; broker %.0f µs/cmd", perInput(cpu, n))
}

func rate(n int, d time.Duration) float64 {
	if n == 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func perInput(cpu time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / float64(n)
}

// slowServer is the http phase's external system: every POST is answered
// 201 after delay, and counted (a count above the commands is a double
// effect).
func slowServer(delay time.Duration) (*httptest.Server, *atomic.Int64) {
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		time.Sleep(delay)
		posts.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	return srv, &posts
}

// gitCommit names the commit the run measured, with "-dirty" when the
// working tree differs from it, so a table is never attributed to code it
// did not run.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}
