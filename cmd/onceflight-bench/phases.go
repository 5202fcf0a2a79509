package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/proctest"
)

// serveRun is one measured window of a serve process.
type serveRun struct {
	n          int
	drain      time.Duration // first of (ready, first outcome) → last outcome read
	readyAfter time.Duration // process start → readyz 200
	cpu        time.Duration // serve's user+sys CPU over drain
	brokerCPU  time.Duration // the broker's, over the same window
	hwmKB      int64
	errs       int
	warns      int
	firstLog   string
	statuses   string // outcomes that were not succeeded
	replayed   int
	audit      string
	journal    int64 // journal offsets written during the run
	// steady is the window from the 10th to the 90th percent of outcomes
	// read: the start (connections dialed, fetches and the first
	// transactions under way) and the tail (the last, slowest
	// entities) left out. A short drain at 1 024 in flight spends a
	// large and varying part of its time in those two, so its whole
	// rate ranks builds badly (BENCHMARKS.md, "Round 13 (http)").
	steady struct {
		n    int
		wall time.Duration // 10 % → 90 % of outcomes
		cpu  time.Duration // serve's CPU over the same window
		// head and tail are the time to the first 10 % (from the
		// drain's start) and from the 90th percent to the last.
		head, tail time.Duration
	}
}

// steadyRate is the outcomes per second of the steady window, 0 when
// there is none.
func (r serveRun) steadyRate() float64 {
	if r.steady.wall <= 0 {
		return 0
	}
	return float64(r.steady.n) / r.steady.wall.Seconds()
}

// steadyCPUPerCmd is serve's CPU per command in the steady window, in µs.
func (r serveRun) steadyCPUPerCmd() float64 {
	if r.steady.n == 0 {
		return 0
	}
	return float64(r.steady.cpu.Microseconds()) / float64(r.steady.n)
}

// steadyNote describes the steady window for a row's note.
func (r serveRun) steadyNote() string {
	if r.steady.n == 0 {
		return ""
	}
	return fmt.Sprintf("; outcomes 10→90 %%: %.0f/s, %.0f µs CPU/cmd (first 10 %% after %.1fs, last 10 %% took %.1fs)",
		r.steadyRate(), r.steadyCPUPerCmd(), r.steady.head.Seconds(), r.steady.tail.Seconds())
}

func (r serveRun) rate() float64 {
	if r.drain <= 0 {
		return 0
	}
	return float64(r.n) / r.drain.Seconds()
}

func (r serveRun) cpuPerCmd() float64 {
	if r.n == 0 {
		return 0
	}
	return float64(r.cpu.Microseconds()) / float64(r.n)
}

func (r serveRun) rssMB() float64 { return float64(r.hwmKB) / 1024 }

func (r serveRun) logCell() string { return fmt.Sprintf("%d/%d", r.errs, r.warns) }

// startServe starts `onceflight serve` on the run's broker and topics.
func (b *bench) startServe(name, dataDir string, inflight int) (*proctest.Proc, string, error) {
	httpAddr, err := proctest.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	args := []string{"serve",
		"--config", b.configPath,
		"--data-dir", dataDir,
		"--http", httpAddr,
		"--group", b.group,
		"--partitions", strconv.Itoa(b.partitions),
		"--max-inflight", strconv.Itoa(inflight),
		"--executor-id", b.prefix + name,
		"--session-timeout", "10s",
	}
	// A control key as a deployment has one: without it serve warns (every
	// operator decision would be refused), which the run counts as a
	// problem.
	keyFile := filepath.Join(b.dir, "control-keys.json")
	if _, err := os.Stat(keyFile); err != nil {
		if out, err := exec.Command(b.bin, "keygen", "--out", keyFile).CombinedOutput(); err != nil {
			return nil, "", fmt.Errorf("keygen: %w: %s", err, out)
		}
	}
	args = append(args, "--control-key-file", keyFile)
	args = append(args, b.kafkaArgs()...)
	args = append(args, b.serveArgs...)
	c, err := proctest.Start(b.dir, "serve-"+name, b.bin, args...)
	if err != nil {
		return nil, "", err
	}
	return c, httpAddr, nil
}

// stopServe stops c, counts its log's errors and warnings into r, and
// audits the topics as c left them (issue 8: audit must pass on the topics
// a benchmark run leaves).
func (b *bench) stopServe(ctx context.Context, c *proctest.Proc, phase string, r *serveRun) {
	stopErr := c.Stop(30 * time.Second)
	r.errs, r.warns, r.firstLog = c.LogCounts()
	if r.errs > 0 || r.warns > 0 {
		b.problem("%s: serve logged %d ERROR and %d WARN lines (%s); first: %s", phase, r.errs, r.warns, c.LogPath, r.firstLog)
	}
	if stopErr != nil {
		b.problem("%s: %v", phase, stopErr)
	}
	if !b.audit {
		r.audit = "off"
		return
	}
	v, err := b.runAudit(ctx, phase)
	r.audit = v
	if err != nil {
		b.problem("%v", err)
	}
}

// drain produces spec's backlog, then starts serve on dataDir and measures
// how fast it answers all of it. The backlog is complete before serve
// starts, so the rate is the executor's, not the producer's.
//
// Results are named: the deferred stop fills in the log counts and the
// audit verdict after the measurement returns.
func (b *bench) drain(ctx context.Context, phase string, spec cmdSpec, dataDir string, inflight int) (r serveRun, err error) {
	r.n = spec.n
	w, err := b.newOutcomeWatch(ctx)
	if err != nil {
		return r, err
	}
	defer w.close()
	_, j0, err := b.endOffsets(ctx, b.topics.Journal)
	if err != nil {
		return r, err
	}
	if err := b.produceBacklog(ctx, spec, ""); err != nil {
		return r, err
	}
	c, httpAddr, err := b.startServe(phase, dataDir, inflight)
	if err != nil {
		return r, err
	}
	defer func() { b.stopServe(ctx, c, phase, &r) }()

	ready, err := proctest.WaitReady(ctx, c, httpAddr, 2*time.Millisecond)
	if err != nil {
		return r, err
	}
	r.readyAfter = ready.Sub(c.Started)
	s0, err := sampleProc(c.Pid())
	if err != nil {
		return r, err
	}
	broker0 := b.brokerCPU()
	// The steady window's ends: serve's CPU is sampled when the outcome
	// at 10 % and at 90 % of the run is read.
	lo, hi := spec.n/10, spec.n-spec.n/10
	var read int
	var at [2]time.Time
	var cpuAt [2]time.Duration
	w.onOutcome = func(_ string, t time.Time) {
		read++
		for i, mark := range [2]int{lo, hi} {
			if read == mark && mark > 0 {
				if s, err := sampleProc(c.Pid()); err == nil {
					at[i], cpuAt[i] = t, s.CPU
				}
			}
		}
	}
	res, err := w.await(ctx, spec.ids(), b.stall, func() error {
		if c.Exited() {
			return c.ExitErr()
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("%s: %w (serve log %s)", phase, err, c.LogPath)
	}
	s1, err := sampleProc(c.Pid())
	if err != nil {
		return r, err
	}
	t0 := ready
	if res.first.Before(t0) {
		t0 = res.first
	}
	r.drain = res.last.Sub(t0)
	if !at[0].IsZero() && at[1].After(at[0]) {
		r.steady.n = hi - lo
		r.steady.wall = at[1].Sub(at[0])
		r.steady.cpu = cpuAt[1] - cpuAt[0]
		r.steady.head = at[0].Sub(t0)
		r.steady.tail = res.last.Sub(at[1])
	}
	r.cpu = s1.CPU - s0.CPU
	r.brokerCPU = b.brokerCPU() - broker0
	r.hwmKB = s1.HWMKB
	r.statuses, r.replayed = w.notSucceeded(), w.replayed
	if r.statuses != "" {
		b.problem("%s: outcomes not succeeded: %s", phase, r.statuses)
	}
	if _, j1, err := b.endOffsets(ctx, b.topics.Journal); err == nil {
		r.journal = j1 - j0
	}
	return r, nil
}

// latencyRun holds the one-at-a-time samples.
type latencyRun struct {
	raw, fresh, repeat []time.Duration
	serve              serveRun
	// idleCPU is serve's CPU per second of wall time with nothing to do:
	// a busy loop or a short timer shows up here.
	idleCPU float64
	// The machine: settle is what -latency-settle did (nil: not asked),
	// dirty the page cache's dirty bytes when the samples started, and
	// machine the CPU during them (machineNote).
	settle  *settled
	dirty   *dirtyState
	machine string
	// probe is cpuProbe's ns per step before and after the samples.
	probe [2]float64
	// idlePerSample is how often the CPUs went idle per sample (of the
	// three kinds together); -1 when not known.
	idlePerSample float64
}

// settleLimitKB is the dirty page cache (Dirty + Writeback) under which
// -latency-settle counts the disk as settled.
const settleLimitKB = 32 << 10

// idleWindow is how long the latency phase watches serve with nothing to
// do before its samples.
const idleWindow = 3 * time.Second

// latency measures one command at a time, interleaving the three kinds so
// that drift on a shared machine hits them alike: the raw Kafka round trip
// (produce with linger 0, read the record back read_committed), a new key
// (produce a command, read its outcome read_committed), and the same key
// again (answered from its final record).
//
// With settle > 0 the samples start from a settled disk: right before
// them (after the warm-up and the idle window), settleDisk writes the page cache back and waits at most settle
// for it to stay small. What is measured is the same; only when.
func (b *bench) latency(ctx context.Context, dataDir string, samples, warmup int, settle time.Duration) (lr latencyRun, err error) {
	rtTopic := b.prefix + "lat.raw"
	if err := createTopic(ctx, b.adm, rtTopic, b.partitions, nil); err != nil {
		return lr, err
	}
	rtFrom, _, err := b.endOffsets(ctx, rtTopic)
	if err != nil {
		return lr, err
	}
	rt, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{rtTopic: rtFrom}),
		kgo.FetchMaxWait(time.Second))
	if err != nil {
		return lr, fmt.Errorf("latency: round-trip reader: %w", err)
	}
	defer rt.Close()
	w, err := b.newOutcomeWatch(ctx)
	if err != nil {
		return lr, err
	}
	defer w.close()

	c, httpAddr, err := b.startServe("latency", dataDir, b.inflight)
	if err != nil {
		return lr, err
	}
	defer func() { b.stopServe(ctx, c, "latency", &lr.serve) }()
	if _, err := proctest.WaitReady(ctx, c, httpAddr, 2*time.Millisecond); err != nil {
		return lr, err
	}
	alive := func() error {
		if c.Exited() {
			return c.ExitErr()
		}
		return nil
	}
	one := func(spec cmdSpec, i int) (time.Duration, error) {
		rec, err := b.command(spec, i)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		if err := b.lat.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return 0, fmt.Errorf("latency: produce %s: %w", spec.id(i), err)
		}
		if _, err := w.await(ctx, map[string]struct{}{spec.id(i): {}}, b.stall, alive); err != nil {
			return 0, fmt.Errorf("latency: %s: %w (serve log %s)", spec.id(i), err, c.LogPath)
		}
		return time.Since(start), nil
	}
	roundTrip := func(i int) (time.Duration, error) {
		val := []byte("rt-" + strconv.Itoa(i))
		rec := &kgo.Record{Topic: rtTopic, Key: []byte("e-" + strconv.Itoa(i%b.entities)), Value: val}
		start := time.Now()
		if err := b.lat.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return 0, fmt.Errorf("latency: raw produce: %w", err)
		}
		for {
			fs := rt.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("latency: raw read: %w", err)
			}
			found := false
			fs.EachRecord(func(r *kgo.Record) { found = found || string(r.Value) == string(val) })
			if found {
				return time.Since(start), nil
			}
		}
	}
	fresh := cmdSpec{action: "bench.noop", idPrefix: "ln", keyPrefix: "lk"}
	again := cmdSpec{action: "bench.noop", idPrefix: "lr", keyPrefix: "lk"}
	// Warm-up: connections, the executor's first transactions, page cache.
	for i := range warmup {
		if _, err := roundTrip(-1 - i); err != nil {
			return lr, err
		}
		if _, err := one(fresh, -1-i); err != nil {
			return lr, err
		}
	}
	i0, err := sampleProc(c.Pid())
	if err != nil {
		return lr, err
	}
	idleStart := time.Now()
	select {
	case <-ctx.Done():
		return lr, fmt.Errorf("latency: idle window: %w", ctx.Err())
	case <-time.After(idleWindow):
	}
	s0, err := sampleProc(c.Pid())
	if err != nil {
		return lr, err
	}
	lr.idleCPU = float64(s0.CPU-i0.CPU) / float64(time.Since(idleStart))
	if settle > 0 {
		st, err := settleDisk(ctx, settleLimitKB, settle)
		if err != nil {
			return lr, fmt.Errorf("latency: settle: %w", err)
		}
		lr.settle = &st
	}
	if d, err := readDirty(); err == nil {
		lr.dirty = &d
	}
	lr.probe[0] = cpuProbe()
	m0, m0err := readCPUTimes()
	idle0, idleOK := idleEntries()
	fmt.Fprintf(os.Stderr, "latency: samples\n") // a mark for tools watching the run
	for i := range samples {
		d, err := roundTrip(i)
		if err != nil {
			return lr, err
		}
		lr.raw = append(lr.raw, d)
		if d, err = one(fresh, i); err != nil {
			return lr, err
		}
		lr.fresh = append(lr.fresh, d)
		if d, err = one(again, i); err != nil {
			return lr, err
		}
		lr.repeat = append(lr.repeat, d)
	}
	idle1, idleOK1 := idleEntries()
	if m1, err := readCPUTimes(); err == nil && m0err == nil {
		lr.machine = machineNote(m0, m1, runtime.NumCPU())
	}
	lr.idlePerSample = -1
	if idleOK && idleOK1 {
		lr.idlePerSample = float64(idle1-idle0) / float64(3*samples)
	}
	lr.probe[1] = cpuProbe()
	s1, err := sampleProc(c.Pid())
	if err != nil {
		return lr, err
	}
	lr.serve.n = 2 * samples
	lr.serve.cpu = s1.CPU - s0.CPU
	lr.serve.hwmKB = s1.HWMKB
	if s := w.notSucceeded(); s != "" {
		b.problem("latency: outcomes not succeeded: %s", s)
	}
	return lr, nil
}

// restoreRun is an executor with an empty data dir catching up the journal.
type restoreRun struct {
	journal    int64 // journal offsets (records and markers) to catch up
	rawRecords int
	rawTime    time.Duration
	serve      serveRun
	maxTook    time.Duration // longest "partition restored" took= in the log
	failures   int           // "restore failed" lines: attempts serve gave up and rejoined
}

// restore fills the journal to at least target offsets (by draining more
// noop commands through a serve on fillDir), reads it raw, then times a
// serve with an empty data dir from process start until /readyz answers
// 200 (group join plus restore of every partition), for at most wait. perCmd is the journal
// offsets one command wrote in an earlier phase (0: unknown).
func (b *bench) restore(ctx context.Context, fillDir string, target int64, perCmd float64, wait time.Duration) (rr restoreRun, fill *serveRun, err error) {
	_, have, err := b.endOffsets(ctx, b.topics.Journal)
	if err != nil {
		return rr, nil, err
	}
	if have < target {
		if perCmd <= 0 {
			perCmd = 2.1 // measured on a noop backlog, 2026-12-01
		}
		n := int(float64(target-have)/perCmd) + 1
		fmt.Fprintf(os.Stderr, "restore: journal has %d offsets, filling to %d with %d more commands\n", have, target, n)
		r, err := b.drain(ctx, "restore-fill", cmdSpec{action: "bench.noop", idPrefix: "f", keyPrefix: "fk", n: n}, fillDir, b.inflight)
		fill = &r
		if err != nil {
			return rr, fill, err
		}
		if _, have, err = b.endOffsets(ctx, b.topics.Journal); err != nil {
			return rr, fill, err
		}
	}
	rr.journal = have
	if rr.rawRecords, rr.rawTime, err = b.rawRead(ctx, b.topics.Journal); err != nil {
		return rr, fill, err
	}

	c, httpAddr, err := b.startServe("restore", filepath.Join(b.dir, "restore-state"), b.inflight)
	if err != nil {
		return rr, fill, err
	}
	defer func() { b.stopServe(ctx, c, "restore", &rr.serve) }()
	// A restore that fails is retried by serve (it rejoins and restores
	// again), so readiness may never come: bound the wait.
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ready, err := waitRestored(wctx, c, httpAddr, b.partitions)
	if log, rerr := os.ReadFile(c.LogPath); rerr == nil {
		rr.maxTook = maxRestoreTook(log)
		_, rr.failures = restoredSince(log)
	}
	if err != nil {
		return rr, fill, fmt.Errorf("restore of %d journal offsets: %w (serve log %s)", have, err, c.LogPath)
	}
	s, err := sampleProc(c.Pid())
	if err != nil {
		return rr, fill, err
	}
	rr.serve.n = int(have)
	rr.serve.readyAfter = ready.Sub(c.Started)
	rr.serve.drain = rr.serve.readyAfter
	rr.serve.cpu = s.CPU
	rr.serve.hwmKB = s.HWMKB
	if log, err := os.ReadFile(c.LogPath); err == nil {
		rr.maxTook = maxRestoreTook(log)
	}
	return rr, fill, nil
}

var (
	restoredRE     = regexp.MustCompile(`msg="partition restored".* took=(\S+)`)
	restoredPartRE = regexp.MustCompile(`msg="partition restored" partition=(\d+)`)
	restoreFailRE  = regexp.MustCompile(`msg="restore (failed|stopped)`)
)

// restoredSince returns the partitions serve logged as restored after its
// last "restore failed" line, and how many such lines there were. serve's
// /readyz alone does not say a restore finished: when some partitions'
// restores fail, it answers 200 with only the others restored until the
// executor rejoins (seen 2026-12-01 with 1 M journal records), so the
// restore phase waits for both.
func restoredSince(log []byte) (map[int]bool, int) {
	failures := restoreFailRE.FindAllIndex(log, -1)
	from := 0
	if len(failures) > 0 {
		from = failures[len(failures)-1][1]
	}
	parts := map[int]bool{}
	for _, m := range restoredPartRE.FindAllSubmatch(log[from:], -1) {
		if p, err := strconv.Atoi(string(m[1])); err == nil {
			parts[p] = true
		}
	}
	return parts, len(failures)
}

// waitRestored waits until serve's /readyz answers 200 and its log shows
// every one of partitions restored since its last failed restore.
func waitRestored(ctx context.Context, c *proctest.Proc, httpAddr string, partitions int) (time.Time, error) {
	for {
		ready, err := proctest.WaitReady(ctx, c, httpAddr, 2*time.Millisecond)
		if err != nil {
			return time.Time{}, err
		}
		log, err := os.ReadFile(c.LogPath)
		if err != nil {
			return time.Time{}, fmt.Errorf("read serve log: %w", err)
		}
		parts, failures := restoredSince(log)
		if len(parts) >= partitions {
			return ready, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("readyz 200 but %d of %d partitions restored since the last of %d failed restores: %w", len(parts), partitions, failures, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// maxRestoreTook returns the longest took= of serve's "partition restored"
// lines: how long the slowest partition's catch-up ran, without the join.
func maxRestoreTook(log []byte) time.Duration {
	var longest time.Duration
	for _, m := range restoredRE.FindAllSubmatch(log, -1) {
		if d, err := time.ParseDuration(string(m[1])); err == nil && d > longest {
			longest = d
		}
	}
	return longest
}
