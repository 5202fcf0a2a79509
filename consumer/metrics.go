package consumer

import "github.com/prometheus/client_golang/prometheus"

// metrics are registered on a caller-given registry so that tests can run
// several executors in one process.
type metrics struct {
	commands      *prometheus.CounterVec
	replays       prometheus.Counter
	duration      *prometheus.HistogramVec
	outboxBacklog prometheus.Gauge
	lag           *prometheus.GaugeVec
	unresolved    prometheus.Gauge
	fenced        *prometheus.CounterVec
	txns          *prometheus.CounterVec
	deadletters   prometheus.Counter
	forwarded     prometheus.Counter
	halted        prometheus.Gauge
	heldParts     prometheus.Gauge
	paused        prometheus.Gauge
	tooLarge      prometheus.Counter
	gov           *govMetrics // governance.go
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceflight_commands_total", Help: "Commands answered, by action and outcome status.",
		}, []string{"action", "status"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceflight_replays_total", Help: "Commands answered from a recorded result instead of executing.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "onceflight_execution_duration_seconds", Help: "Connector execution time, from first attempt to decision.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"action", "status"}),
		outboxBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_outbox_backlog", Help: "Records staged for the transaction in progress, not yet committed.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "onceflight_consumer_lag", Help: "Commands behind the high watermark, per partition.",
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
		heldParts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_held_partitions", Help: "Assigned partitions not processed because their journal lost records this executor never read.",
		}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceflight_paused_partitions", Help: "Partitions whose fetching is paused because their buffered commands reached a bound.",
		}),
		tooLarge: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceflight_too_large_total", Help: "Commands answered too_large, or records shrunk, because they would not fit max.message.bytes.",
		}),
	}
	for _, s := range []string{"intent", "answer", "commit"} {
		m.fenced.WithLabelValues(s)
	}
	m.gov = newGovMetrics(reg)
	reg.MustRegister(m.commands, m.replays, m.duration, m.outboxBacklog, m.lag, m.unresolved, m.fenced, m.txns, m.deadletters, m.forwarded,
		m.halted, m.heldParts, m.paused, m.tooLarge)
	return m
}
