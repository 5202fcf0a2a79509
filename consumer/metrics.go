package consumer

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/internal/connectors/limit"
	"github.com/onceflight/onceflight/schemas"
)

// metrics are registered on a caller-given registry so that tests can run
// several executors in one process.
type metrics struct {
	commands      *prometheus.CounterVec
	replays       prometheus.Counter
	established   *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	outboxBacklog prometheus.Gauge
	lag           *prometheus.GaugeVec
	unresolved    prometheus.Gauge
	fenced        *prometheus.CounterVec
	txns          *prometheus.CounterVec
	deadletters   prometheus.Counter
	forwarded     prometheus.Counter
	halted        prometheus.Gauge
	storeFailed   prometheus.Gauge
	heldParts     prometheus.Gauge
	paused        prometheus.Gauge
	tooLarge      prometheus.Counter
	skipRefills   prometheus.Counter // skip.go
	ready         prometheus.Gauge
	gov           *govMetrics // governance.go
	systems       *systemsCollector
	// hw and mem are the memory bounds' high-water marks and gauges
	// (memory.go); mem reads the executor set by New at scrape time.
	hw  highWater
	mem *memCollector
	// establishedOf and durationOf are established's and duration's
	// children by their label values, looked up once per pair.
	establishedOf children[prometheus.Counter]
	durationOf    children[prometheus.Observer]
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceflight_commands_total", Help: "Commands answered, by action and outcome status.",
		}, []string{"action", "status"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceflight_replays_total", Help: "Commands answered from a recorded result instead of executing.",
		}),
		established: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceflight_outcomes_established_total",
			Help: "Records that got a new status, by the status and how it was established (answer, confirmation, reconciler, operator, rule).",
		}, []string{"status", "established_by"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "onceflight_execution_duration_seconds", Help: "Connector execution time, from first attempt to decision.",
			// 1 ms to 149 s: up to past a 30 s confirm_timeout and the
			// 120 s an unresolved confirmation may take.
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"action", "status"}),
		outboxBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_outbox_backlog", Help: "Records staged for the transaction in progress, not yet committed.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "onceflight_consumer_lag", Help: "Offsets of the commands topic not yet answered (end offset minus the committed watermark), per owned partition; refreshed every second.",
		}, []string{"partition"}),
		unresolved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_unresolved_executions", Help: "Unresolved records in partitions this process owns.",
		}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceflight_fenced_writes_total", Help: "Writes refused because this process no longer owned the partition.",
		}, []string{"stage"}),
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceflight_transactions_total", Help: "Executor transactions (records, outcomes and offsets), by result (committed, aborted).",
		}, []string{"result"}),
		deadletters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceflight_deadletters_total", Help: "Undecodable records sent to the deadletter topic.",
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceflight_forwarded_total", Help: "Commands forwarded to their entity's partition.",
		}),
		halted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_halted", Help: "1 when the executor stopped taking new work (a topic's partition count changed).",
		}),
		storeFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_store_failed", Help: "1 when a write to the dedupe index failed for good (I/O error, disk full): the executor stopped taking work and left its group. Restart it on a healthy disk; the journal rebuilds the index.",
		}),
		heldParts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_held_partitions", Help: "Assigned partitions not processed because their journal lost records this executor never read, or holds records no trusted executor signature covers.",
		}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_paused_partitions", Help: "Partitions whose fetching is paused because their buffered commands reached a bound.",
		}),
		tooLarge: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceflight_too_large_total", Help: "Commands answered too_large, or records shrunk, because they would not fit max.message.bytes.",
		}),
		skipRefills: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceflight_skipped_refills_total", Help: "Reads of a hot entity's skipped commands again from Kafka (each of at most max-buffered-per-entity commands).",
		}),
	}
	for _, s := range []string{"intent", "answer", "marker", "commit"} {
		m.fenced.WithLabelValues(s)
	}
	for _, r := range []string{"committed", "aborted"} {
		m.txns.WithLabelValues(r)
	}
	m.ready = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "onceflight_ready", Help: "1 while /readyz would answer 200: a group member in contact with the brokers, assigned partitions restored, none held, not halted, the dedupe index writable.",
	})
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "onceflight_build_info", Help: "Always 1; the labels say which build runs.",
	}, []string{"version", "revision", "goversion"})
	build.WithLabelValues(buildInfo()).Set(1)
	reg.MustRegister(m.established)
	// The series an operator compares start at 0, so a ratio (successes
	// that needed a confirmation, of all successes) exists from the start.
	for st, bys := range establishedSeries {
		for _, by := range bys {
			m.established.WithLabelValues(string(st), by)
		}
	}
	m.gov = newGovMetrics(reg)
	m.systems = newSystemsCollector()
	m.mem = &memCollector{hw: &m.hw}
	reg.MustRegister(m.systems, m.mem, m.commands, m.replays, m.duration, m.outboxBacklog, m.lag, m.unresolved, m.fenced, m.txns, m.deadletters, m.forwarded,
		m.halted, m.storeFailed, m.heldParts, m.paused, m.tooLarge, m.skipRefills, m.ready, build)
	return m
}

// precreate gives every configured action's command counters and duration
// series a zero value, so dashboards and alerts see them before the first
// command (a rate over a series that does not exist yet is no data, not 0).
func (m *metrics) precreate(actions []string) {
	for _, a := range actions {
		for _, s := range []schemas.Status{schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusUnresolved, schemas.StatusRejected, schemas.StatusHeld} {
			m.commands.WithLabelValues(a, string(s))
		}
	}
}

// buildInfo is the main module's version, its VCS revision and the Go
// version, as the binary records them.
func buildInfo() (version, revision, goVersion string) {
	version, revision, goVersion = "dev", "unknown", runtime.Version()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		version = v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	return
}

// answerTally counts a transaction's answers by action and status for the
// commands counter, so that the counter's child is looked up once per
// distinct pair and transaction, not once per answer: a label lookup
// hashes and checks both values, and at ~500 answers per transaction in a
// backlog that was ~0.2 µs of every new key's CPU (BENCHMARKS.md, round
// 16 (newkey)). Transactions hold few distinct pairs; past
// answerTallyPairs the rest are counted one by one.
type answerTally struct {
	pairs []answerCount
	last  int // index of the pair counted last: answers come in runs
}

type answerCount struct {
	action, status string
	n              int
}

const answerTallyPairs = 16

// add counts one answer; add of a pair the tally has no room for counts it
// into c at once.
func (t *answerTally) add(c *prometheus.CounterVec, action, status string) {
	if t.last < len(t.pairs) && t.pairs[t.last].action == action && t.pairs[t.last].status == status {
		t.pairs[t.last].n++
		return
	}
	for i := range t.pairs {
		if t.pairs[i].action == action && t.pairs[i].status == status {
			t.pairs[i].n++
			t.last = i
			return
		}
	}
	if len(t.pairs) == answerTallyPairs {
		c.WithLabelValues(actionLabel(action), status).Inc()
		return
	}
	t.last = len(t.pairs)
	t.pairs = append(t.pairs, answerCount{action: action, status: status, n: 1})
}

// addTo adds the tally's counts to c.
func (t *answerTally) addTo(c *prometheus.CounterVec) {
	for _, p := range t.pairs {
		c.WithLabelValues(actionLabel(p.action), p.status).Add(float64(p.n))
	}
}

// actionLabel is the action label of a record: an undecodable command has
// none, and gets "(none)" rather than an empty label.
func actionLabel(a string) string {
	if a == "" {
		return "(none)"
	}
	return a
}

// systemsCollector exports each external system's state
// (docs/connectors.md#protecting-the-external-system) as it is at scrape
// time: the limits and breaker keep their own counts, so nothing here can
// drift from them.
type systemsCollector struct {
	stats atomic.Pointer[func() []limit.Stats]

	refused, limit, ceiling, inFlight, waiting, breaker, opened, steppedAside *prometheus.Desc
}

func newSystemsCollector() *systemsCollector {
	l := []string{"system"}
	return &systemsCollector{
		refused: prometheus.NewDesc("onceflight_system_refused_total",
			"Answers of an external system saying it did not take the request: busy (HTTP 429) or down (HTTP 503, connection refused).", []string{"system", "answer"}, nil),
		limit: prometheus.NewDesc("onceflight_system_concurrency_limit",
			"Requests the executor lets be in flight to the system now: adapted to its answers, at most the ceiling.", l, nil),
		ceiling: prometheus.NewDesc("onceflight_system_concurrency_ceiling",
			"The system's configured max_concurrent (or --max-inflight).", l, nil),
		inFlight: prometheus.NewDesc("onceflight_system_in_flight",
			"Requests sent to the system and not answered yet.", l, nil),
		waiting: prometheus.NewDesc("onceflight_system_waiting_commands",
			"Commands waiting for the system: a Retry-After or backoff, a slot under its limit, its rate, or its breaker. They hold no slot.", l, nil),
		breaker: prometheus.NewDesc("onceflight_system_breaker_state",
			"The system's breaker: 0 closed, 1 open (nothing sent, commands wait), 2 half open (one probe out).", l, nil),
		opened: prometheus.NewDesc("onceflight_system_breaker_opened_total",
			"Times the system's breaker opened.", l, nil),
		steppedAside: prometheus.NewDesc("onceflight_system_stepped_aside_total",
			"New commands that stepped aside instead of waiting for the system while it was down (enough waited already): read again from Kafka when it has room.", l, nil),
	}
}

func (c *systemsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.refused, c.limit, c.ceiling, c.inFlight, c.waiting, c.breaker, c.opened, c.steppedAside} {
		ch <- d
	}
}

func (c *systemsCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.stats.Load()
	if f == nil {
		return
	}
	for _, s := range (*f)() {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Busy), s.Name, "busy")
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Down), s.Name, "down")
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(s.Limit), s.Name)
		ch <- prometheus.MustNewConstMetric(c.ceiling, prometheus.GaugeValue, float64(s.Ceiling), s.Name)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight), s.Name)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(s.Waiting), s.Name)
		ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, float64(s.Breaker), s.Name)
		ch <- prometheus.MustNewConstMetric(c.opened, prometheus.CounterValue, float64(s.Opened), s.Name)
		ch <- prometheus.MustNewConstMetric(c.steppedAside, prometheus.CounterValue, float64(s.SteppedAside), s.Name)
	}
}

// watchSystems makes the systems collector report what stats returns.
func (m *metrics) watchSystems(stats func() []limit.Stats) { m.systems.stats.Store(&stats) }

// memCollector reports, at scrape time, what the memory bounds hold now,
// the highest it held since the executor started, and the configured
// limits (docs/memory.md), so that every bound is visible next to its
// use.
type memCollector struct {
	hw *highWater
	ex atomic.Pointer[Executor]
}

var (
	memDescNow = prometheus.NewDesc("onceflight_memory_in_use",
		"What a memory bound currently holds: buffered_commands/buffered_bytes (consumed, queued or running), staged_commands/staged_bytes (answered, waiting for the transaction to commit; bytes estimated), overlay_entries (staged records, entity versions and claimed keys visible before Pebble), skipped_commands (commands of hot entities read past and remembered by offset, 8 bytes each), total_commands/total_bytes (buffered + staged, what max-buffered and max-buffered-bytes bound), dedupe_presence_bytes (the dedupe index's filter of stored keys; it only grows).",
		[]string{"what"}, nil)
	memDescPeak = prometheus.NewDesc("onceflight_memory_in_use_peak",
		"The highest value of onceflight_memory_in_use since the process started (exact: raised where the value changes, not sampled).",
		[]string{"what"}, nil)
	memDescLimit = prometheus.NewDesc("onceflight_memory_limit",
		"A configured memory bound: max_buffered (commands, buffered + staged), max_buffered_bytes (buffered + staged; staged alone too), fetch_bytes (max-fetch-bytes × max-concurrent-fetches, held by the Kafka client), dedupe_cache_bytes, dedupe_memtable_bytes, dedupe_entry_cache_entries and dedupe_presence_bytes (the dedupe index), max_skipped_per_partition (skipped commands remembered per partition).",
		[]string{"bound"}, nil)
)

func (c *memCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- memDescNow
	ch <- memDescPeak
	ch <- memDescLimit
}

func (c *memCollector) Collect(ch chan<- prometheus.Metric) {
	var now memorySnapshot
	e := c.ex.Load()
	if e != nil {
		if p := e.pipe.Load(); p != nil {
			now = p.memory()
		}
	}
	g := func(d *prometheus.Desc, v float64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label)
	}
	g(memDescNow, float64(now.bufferedN), "buffered_commands")
	g(memDescNow, float64(now.bufferedBytes), "buffered_bytes")
	g(memDescNow, float64(now.stagedN), "staged_commands")
	g(memDescNow, float64(now.stagedBytes), "staged_bytes")
	g(memDescNow, float64(now.overlay), "overlay_entries")
	g(memDescNow, float64(now.skipped), "skipped_commands")
	g(memDescNow, float64(now.bufferedN+now.stagedN), "total_commands")
	g(memDescNow, float64(now.bufferedBytes+now.stagedBytes), "total_bytes")
	g(memDescPeak, c.hw.buffered.n.get(), "buffered_commands")
	g(memDescPeak, c.hw.buffered.bytes.get(), "buffered_bytes")
	g(memDescPeak, c.hw.staged.n.get(), "staged_commands")
	g(memDescPeak, c.hw.staged.bytes.get(), "staged_bytes")
	g(memDescPeak, c.hw.overlay.get(), "overlay_entries")
	g(memDescPeak, c.hw.skipped.get(), "skipped_commands")
	g(memDescPeak, c.hw.total.n.get(), "total_commands")
	g(memDescPeak, c.hw.total.bytes.get(), "total_bytes")
	if e == nil {
		return
	}
	if e.store != nil {
		// The filter never shrinks: its peak is what it holds now.
		pb := float64(e.store.PresenceBytes())
		g(memDescNow, pb, "dedupe_presence_bytes")
		g(memDescPeak, pb, "dedupe_presence_bytes")
	}
	cfg := &e.cfg
	g(memDescLimit, float64(cfg.MaxBuffered), "max_buffered")
	g(memDescLimit, float64(cfg.MaxSkippedPerPartition), "max_skipped_per_partition")
	g(memDescLimit, float64(cfg.MaxBufferedBytes), "max_buffered_bytes")
	g(memDescLimit, float64(cfg.MaxFetchBytes)*float64(cfg.MaxConcurrentFetches), "fetch_bytes")
	if e.store != nil {
		l := e.store.Limits()
		g(memDescLimit, float64(l.CacheBytes), "dedupe_cache_bytes")
		g(memDescLimit, float64(l.MemTableBytes), "dedupe_memtable_bytes")
		g(memDescLimit, float64(l.EntryCacheEntries), "dedupe_entry_cache_entries")
		g(memDescLimit, float64(l.PresenceBytes), "dedupe_presence_bytes")
	}
}

// establishedSeries are the (status, established_by) pairs the executor
// writes, each started at 0 (docs/http.md#metrics).
var establishedSeries = map[schemas.Status][]string{
	schemas.StatusSucceeded:  {schemas.EstablishedByAnswer, schemas.EstablishedByConfirmation, schemas.EstablishedByReconciler, schemas.EstablishedByOperator},
	schemas.StatusFailed:     {schemas.EstablishedByAnswer, schemas.EstablishedByConfirmation, schemas.EstablishedByReconciler, schemas.EstablishedByOperator},
	schemas.StatusUnresolved: {schemas.EstablishedByAnswer, schemas.EstablishedByConfirmation},
	schemas.StatusRejected:   {schemas.EstablishedByRule, schemas.EstablishedByOperator},
	schemas.StatusHeld:       {schemas.EstablishedByRule},
}

// establish counts rec's new status by how it was established
// (onceflight_outcomes_established_total).
func (m *metrics) establish(rec *schemas.Record) {
	m.establishedOf.with(m.established.WithLabelValues, string(rec.Status), rec.EstablishedBy).Inc()
}

// executed observes an execution's duration for its action and outcome
// (onceflight_execution_duration_seconds).
func (m *metrics) executed(action string, outcome schemas.Status, took time.Duration) {
	m.durationOf.with(m.duration.WithLabelValues, action, string(outcome)).Observe(took.Seconds())
}

// children holds a metric vector's children by their two label values.
// Every command counts its new status and observes its execution's
// duration: a vector's own lookup hashes and checks both label values
// each time (~0.1 µs), a map read under a read lock here costs a few
// tens of ns (BenchmarkMetricChildren). The vectors' children are never
// deleted, and their label values come from a small set (actions,
// statuses, how established), so neither can the entries here go stale
// or grow without bound.
type children[T any] struct {
	mu sync.RWMutex
	m  map[[2]string]T
}

// with is the child of labels a, b: from the map, or made by of once.
func (c *children[T]) with(of func(...string) T, a, b string) T {
	k := [2]string{a, b}
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = of(a, b)
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[[2]string]T)
	}
	c.m[k] = v
	c.mu.Unlock()
	return v
}
