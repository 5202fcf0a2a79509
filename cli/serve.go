package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/cli/internal/api"
	"github.com/onceflight/onceflight/cli/internal/ingress"
	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/broker"
	"github.com/onceflight/onceflight/internal/brokerfeatures"
	"github.com/onceflight/onceflight/internal/cmalloc"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/dirlock"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/kafkaconf"
	"github.com/onceflight/onceflight/schemas"
)

// serveOptions are serve's flags; demo fills them in code.
type serveOptions struct {
	kf             *kafkaFlags
	configPath     string
	cfg            *config.Config // set instead of configPath by demo
	group          string
	pprofAddr      string
	httpAddr       string
	http           httpAccess
	dataDir        string
	executorID     string
	sessionTimeout time.Duration
	clockDrift     time.Duration
	maxInflight    int
	maxPerPart     int
	partitions     int
	maxDataBytes   int
	maxMsgBytes    int
	maxBuffered    int
	maxBufPart     int
	maxBufBytes    int
	maxBufEntity   int
	maxSkipped     int
	maxBufTotal    int
	maxFetchBytes  int
	cacheSize      int
	restorePar     int
	memoryLimit    int64
	acceptGap      bool
	controlKeyFile string
	embeddedAddr   string
	ingress        ingressOptions
	// checkpoints: signed tree heads of the journal (docs/trust.md).
	checkpoints checkpointOptions
	// consoleAddr, if set, runs the operator console in-process
	// (docs/console.md), its index under dataDir/console.
	consoleAddr     string
	consoleReadOnly bool
	consoleSecure   bool
	// consoleStarted, if set, is called with the console's address.
	consoleStarted func(addr string)
	// started, if set, is called with the broker address and the HTTP
	// address once the executor runs.
	started func(brokers []string, httpAddr string)
}

// minCacheSize is the smallest --cache-size: the dedupe index's two
// memtables (an eighth of the cache each, at least 1 MiB) are reserved
// inside it.
const minCacheSize = 8 << 20

// minMemoryLimit is the smallest --memory-limit: below the executor's
// fixed costs the garbage collector would run without pause.
const minMemoryLimit = 64 << 20

// gcPercentUnderLimit is the collector's target (GOGC) under a memory
// limit: the heap grows to three times what is live before a collection
// instead of twice, until the limit makes the collector work harder.
// Draining a backlog under a 90 MiB limit it halved the collections, for
// 5 % less CPU per new key and 12 % less per repeat; with 1 024 http
// requests in flight, where the limit binds, it changed nothing
// (BENCHMARKS.md, "Round 20 (gc2)").
const gcPercentUnderLimit = 200

// applyMemoryLimit sets the Go runtime's soft memory limit: --memory-limit
// if given, else GOMEMLIMIT if set (the runtime applied it at start), else
// none. There is no default derived from the buffer bounds: a limit below
// what is live makes the collector run without pause, and what is live
// depends on more than the bounds (a derived 100 MiB limit cost the http
// connector at 1 024 in flight 4× the CPU per command: BENCHMARKS.md,
// "Round 7, after the merge").
//
// Under a limit, and unless GOGC sets the collector's target, serve raises
// that target from Go's 100 to gcPercentUnderLimit: the limit holds the
// peak, and below it the heap may grow further between collections.
func applyMemoryLimit(log *slog.Logger, o *serveOptions) {
	switch {
	case o.memoryLimit > 0:
		debug.SetMemoryLimit(o.memoryLimit)
		log.Info("memory limit", "source", "--memory-limit", "bytes", o.memoryLimit)
	case os.Getenv("GOMEMLIMIT") != "":
		log.Info("memory limit", "source", "GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
	default:
		log.Info("memory limit: none", "why", "neither --memory-limit nor GOMEMLIMIT sets one (docs/memory.md)")
	}
	switch {
	case os.Getenv("GOGC") != "":
		log.Info("gc percent", "source", "GOGC", "value", os.Getenv("GOGC"))
	case debug.SetMemoryLimit(-1) < math.MaxInt64: // GOMEMLIMIT=off sets none
		debug.SetGCPercent(gcPercentUnderLimit)
		log.Info("gc percent", "source", "memory limit", "value", gcPercentUnderLimit)
	default:
		log.Info("gc percent", "source", "default", "value", 100)
	}
	// The bound itself is set before main (internal/cmalloc/bound); the
	// count shows it held. An operator's own bound is named when set.
	if n := cmalloc.Arenas(); n >= 0 {
		attrs := []any{"count", n}
		if v := os.Getenv("MALLOC_ARENA_MAX"); v != "" {
			attrs = append(attrs, "MALLOC_ARENA_MAX", v)
		}
		log.Info("malloc arenas", attrs...)
	}
}

// trimSlack is how far glibc's arenas may hold C memory above what
// Pebble holds in use before their free pages are given back.
const trimSlack = 8 << 20

// startTrimmer gives glibc's free pages back while serve runs
// (cmalloc.Trimmer: the holes Pebble's evicted cache blocks leave). The
// returned stop ends it and waits for it; serve calls it once Run
// returns (Run closes the store), so that trims stop with the store.
func startTrimmer(ctx context.Context, store *dedupe.Store, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t := cmalloc.Trimmer{Expected: store.CMemory, Slack: trimSlack, Every: time.Second, Log: log}
	go func() {
		defer close(done)
		t.Run(ctx)
	}()
	return sync.OnceFunc(func() {
		cancel()
		<-done
	})
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an executor",
		Long: `Run an executor: consume commands, execute them through their connectors,
publish outcomes. With no --brokers it first starts the embedded development
broker on 127.0.0.1:9092 with its data under --data-dir. Several serve
processes with the same --group share the partitions.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.maxInflight < 1 {
				return usageErrorf("--max-inflight must be at least 1, got %d", o.maxInflight)
			}
			if o.maxPerPart < 0 {
				return usageErrorf("--max-inflight-per-partition must not be negative, got %d", o.maxPerPart)
			}
			if o.partitions < 1 {
				return usageErrorf("--partitions must be at least 1, got %d", o.partitions)
			}
			if o.restorePar < 1 {
				return usageErrorf("--restore-parallelism must be at least 1, got %d", o.restorePar)
			}
			if o.cacheSize < minCacheSize {
				return usageErrorf("--cache-size must be at least %d (8 MiB): the cache also holds the index's memtables, got %d", minCacheSize, o.cacheSize)
			}
			if o.memoryLimit < 0 || (o.memoryLimit > 0 && o.memoryLimit < minMemoryLimit) {
				return usageErrorf("--memory-limit must be 0 (none) or at least %d (64 MiB), got %d", minMemoryLimit, o.memoryLimit)
			}
			if o.sessionTimeout < time.Second {
				return usageErrorf("--session-timeout must be at least 1s, got %s", o.sessionTimeout)
			}
			if err := refuseUnsetValues(cmd, o); err != nil {
				return err
			}
			if !cmd.Flags().Changed("max-buffered") {
				// The executor's default follows --max-inflight
				// (consumer.Config.MaxBuffered).
				o.maxBuffered = 0
			}
			return runServe(cmd.Context(), o)
		},
	}
	o.kf = addKafkaFlagsDefault(cmd, nil, "Kafka brokers, host:port,...; none: start the embedded broker on 127.0.0.1:9092")
	// The executor's own defaults, so that --help shows what serve runs with.
	def := consumer.Defaults()
	fs := cmd.Flags()
	fs.StringVar(&o.configPath, "config", config.DefaultPath, "actions file (docs/configuration.md)")
	fs.StringVar(&o.group, "group", def.Group, "consumer group shared by the executors of one deployment")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8080", "address of the HTTP endpoints (health, metrics, records); records need --http-token-file or --http-trusted-proxy-header unless it is a loopback address")
	o.http.addFlags(fs)
	fs.StringVar(&o.pprofAddr, "pprof", "", "address of Go's profiling endpoints (/debug/pprof/), off when empty")
	fs.StringVar(&o.dataDir, "data-dir", defaultDataDir, "directory of the local state (a cache of the journal) and of the embedded broker")
	fs.StringVar(&o.executorID, "executor-id", "", "name of this executor in records and its transactional id (default hostname-pid)")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", def.SessionTimeout, "consumer group session timeout")
	fs.DurationVar(&o.clockDrift, "clock-drift", def.ClockDrift, "margin past an attempt's deadline before a new owner confirms an inherited execution, or a confirmation's \"not found\" is trusted; must exceed the real clock skew")
	fs.IntVar(&o.maxInflight, "max-inflight", def.MaxInflight, "requests in flight to each external system without a max_concurrent of its own")
	fs.IntVar(&o.maxPerPart, "max-inflight-per-partition", 0, "requests in flight from one partition to one external system (0: --max-inflight)")
	fs.IntVar(&o.partitions, "partitions", def.Partitions, "partition count of the topics serve creates")
	fs.IntVar(&o.maxDataBytes, "max-data-bytes", schemas.DefaultMaxDataBytes, "largest command data accepted")
	fs.IntVar(&o.maxMsgBytes, "max-message-bytes", def.MaxMessageBytes, "max.message.bytes of the topics serve creates, and the producer's record limit (existing topics must allow at least this)")
	fs.IntVar(&o.maxBuffered, "max-buffered", def.MaxBuffered, "commands consumed and not yet answered, per process (the poll loop waits past it); unset, --max-inflight + 512 when that is larger")
	fs.IntVar(&o.maxBufPart, "max-buffered-per-partition", def.MaxBufferedPerPartition, "commands consumed and not yet answered, per partition (its fetching pauses past it)")
	fs.IntVar(&o.maxBufBytes, "max-buffered-bytes-per-partition", def.MaxBufferedBytesPerPartition, "bytes of commands consumed and not yet answered, per partition (its fetching pauses past it)")
	fs.IntVar(&o.maxBufEntity, "max-buffered-per-entity", def.MaxBufferedPerEntity, "commands of one entity held in memory; its later commands are read past and read again by offset when their turn comes (docs/memory.md)")
	fs.IntVar(&o.maxSkipped, "max-skipped-per-partition", def.MaxSkippedPerPartition, "commands of hot entities read past and remembered by offset (8 bytes each), per partition (its fetching pauses past it)")
	fs.IntVar(&o.maxBufTotal, "max-buffered-bytes", def.MaxBufferedBytes, "bytes of commands consumed and not yet committed, per process: records while queued, answers once staged for the transaction (docs/memory.md)")
	fs.IntVar(&o.maxFetchBytes, "max-fetch-bytes", def.MaxFetchBytes, "largest fetch response; the Kafka client holds at most two ahead of the executor (docs/memory.md)")
	fs.IntVar(&o.restorePar, "restore-parallelism", def.RestoreParallelism, "partitions that rebuild their state from the journal at once; a restore into an empty data dir is the largest resident moment, fewer lowers its peak for a longer restore (docs/memory.md)")
	fs.IntVar(&o.cacheSize, "cache-size", int(def.CacheSize), "bytes of the dedupe index's block cache, which also holds its memtables (docs/memory.md)")
	fs.Int64Var(&o.memoryLimit, "memory-limit", 0, "soft limit in bytes of the Go runtime's memory (as GOMEMLIMIT): the garbage collector works harder near it instead of letting the heap double; 0: GOMEMLIMIT if set, else none (docs/memory.md)")
	fs.StringVar(&o.controlKeyFile, "control-key-file", "", "control key file (onceflight keygen) verifying operator decisions; without one every resolve, approve and release is refused not_allowed")
	fs.BoolVar(&o.acceptGap, "accept-journal-gap", false, "restore past journal records deleted before this executor read them, even if they may hold keys younger than key_memory (they could execute again)")
	fs.StringVar(&o.ingress.addr, "ingress", "", "address of the HTTP ingress (POST /v1/commands/{action}, docs/http.md#ingress), off when empty")
	fs.StringVar(&o.ingress.tokenFile, "ingress-token-file", "", "file holding the bearer token ingress requests must carry; required unless --ingress is a loopback address")
	fs.DurationVar(&o.ingress.maxWait, "ingress-max-wait", ingress.DefaultMaxWait, "longest wait for an outcome an ingress request may ask for (Prefer: wait=N)")
	fs.Float64Var(&o.ingress.rate, "ingress-rate", 0, "ingress requests accepted per second, over all clients (0: no limit)")
	fs.IntVar(&o.ingress.burst, "ingress-burst", 0, "ingress requests accepted at once above --ingress-rate (0: the rate, at least 1)")
	fs.StringVar(&o.consoleAddr, "console", "", "address of the operator console (docs/console.md), run in this process with the --http authentication; off when empty")
	fs.BoolVar(&o.consoleReadOnly, "console-read-only", false, "the console hides and refuses every decision")
	fs.BoolVar(&o.consoleSecure, "console-secure-cookies", false, "mark the console's login cookie Secure (set when users reach it over HTTPS through a proxy)")
	o.checkpoints.addFlags(fs)
	o.embeddedAddr = defaultBrokers
	return cmd
}

// unsetMeansDefault are serve's bounds whose 0 the executor reads as
// "unset": given on the command line, 0 would silently run with the
// default, so it is refused.
var unsetMeansDefault = []string{"max-data-bytes", "max-message-bytes", "max-buffered", "max-buffered-per-partition",
	"max-buffered-bytes-per-partition", "max-buffered-per-entity", "max-skipped-per-partition", "max-buffered-bytes", "max-fetch-bytes"}

// refuseUnsetValues refuses the values of serve's flags that the executor
// or the ingress would replace with a default (a bound of 0, a negative
// --max-data-bytes, a wait or rate below 0) instead of running with them.
func refuseUnsetValues(cmd *cobra.Command, o *serveOptions) error {
	fs := cmd.Flags()
	for _, name := range unsetMeansDefault {
		if f := fs.Lookup(name); f.Changed && f.Value.String() == "0" {
			return usageErrorf("--%s must be at least 1, got 0 (leave it out for the default, %s)", name, f.DefValue)
		}
	}
	switch {
	case o.maxDataBytes < 0:
		return usageErrorf("--max-data-bytes must be at least 1, got %d", o.maxDataBytes)
	case fs.Changed("ingress-max-wait") && o.ingress.maxWait <= 0:
		return usageErrorf("--ingress-max-wait must be positive, got %s", o.ingress.maxWait)
	case o.ingress.rate < 0 || math.IsNaN(o.ingress.rate) || math.IsInf(o.ingress.rate, 0):
		return usageErrorf("--ingress-rate must be a number of requests per second, 0 for no limit, got %v", o.ingress.rate)
	case o.ingress.burst < 0:
		return usageErrorf("--ingress-burst must not be negative (0: the rate), got %d", o.ingress.burst)
	}
	return nil
}

// checkKafka connects once to the executor's cluster and to the cluster
// of every kafka action with its own connection, so that a wrong address,
// protocol or password stops serve at start with the broker's answer; the
// executor's clients would otherwise retry it quietly forever.
//
// It also logs the brokers' transaction protocol (transactions v2, KIP-890,
// or not): the executor issues its own transactional offset commits, and
// which broker behaviour they meet is the first question about a support
// case on a real cluster.
func checkKafka(ctx context.Context, log *slog.Logger, brokers []string, conn []kgo.Opt, cfg *config.Config) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, conn...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if err := kafkaconf.Ping(ctx, cl); err != nil {
		return err
	}
	if f, err := brokerfeatures.Read(ctx, cl); err != nil {
		log.Warn("brokers' features unknown", "err", err)
	} else {
		log.Info("brokers' features", "transactions_v2", f.TransactionsV2(), "features", f.String())
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Actions)) {
		a := cfg.Actions[name]
		if a.Connector != config.ConnectorKafka || !a.OwnConnection() {
			continue
		}
		seeds := brokers
		if len(a.Brokers) > 0 {
			seeds = a.Brokers
		}
		if err := kafkaconf.Check(ctx, append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, a.Kafka.Opts()...)...); err != nil {
			return fmt.Errorf("action %q: %w", name, err)
		}
	}
	return nil
}

// runServe runs until ctx is cancelled and shuts down in order: the
// executor stops fetching, finishes its cycle (executions, transaction with
// the offsets), leaves the group and closes its clients; then the HTTP
// server, Pebble, and last the embedded broker everything else talked to.
func runServe(ctx context.Context, o *serveOptions) error {
	log := slog.Default()
	conn, err := o.kf.conn()
	if err != nil {
		return err
	}
	brokers := o.kf.Brokers
	if len(brokers) == 0 && o.kf.hasConn() {
		return usageErrorf("-X and --kafka-config need --brokers: the embedded broker speaks only PLAINTEXT")
	}
	cfg := o.cfg
	if cfg == nil {
		if cfg, err = loadActions(ctx, o.configPath); err != nil {
			return usageError{err}
		}
	}
	// Who may read the records is settled before anything starts, so a
	// serve that would publish them to the network stops at once.
	auth, err := o.http.authenticator(o.httpAddr, log)
	if err != nil {
		return err
	}
	if o.consoleAddr != "" {
		if err := refuseOpenConsole("--console", o.consoleAddr, auth); err != nil {
			return err
		}
	}
	// Operator decisions must be signed (docs/guarantees.md): without keys the
	// executor refuses them all, and says so once, here.
	var controlKeys *schemas.ControlKeys
	if o.controlKeyFile != "" {
		if controlKeys, err = schemas.LoadControlKeys(o.controlKeyFile); err != nil {
			return usageError{err}
		}
	} else {
		log.Warn("no --control-key-file: every operator decision (resolve, approve, release) will be refused not_allowed. " +
			"Create a key with `onceflight keygen --out FILE` and start serve with --control-key-file FILE (or ONCEFLIGHT_CONTROL_KEY_FILE)")
	}
	ccfg := consumer.Config{
		DataDir:                      filepath.Join(o.dataDir, "state"),
		CacheSize:                    int64(o.cacheSize),
		RestoreParallelism:           o.restorePar,
		KafkaOpts:                    conn,
		Group:                        o.group,
		Topics:                       o.kf.Topics,
		Partitions:                   o.partitions,
		SessionTimeout:               o.sessionTimeout,
		MaxInflight:                  o.maxInflight,
		MaxInflightPerPartition:      o.maxPerPart,
		MaxDataBytes:                 o.maxDataBytes,
		MaxMessageBytes:              o.maxMsgBytes,
		MaxBuffered:                  o.maxBuffered,
		MaxBufferedPerPartition:      o.maxBufPart,
		MaxBufferedBytesPerPartition: o.maxBufBytes,
		MaxBufferedPerEntity:         o.maxBufEntity,
		MaxSkippedPerPartition:       o.maxSkipped,
		MaxBufferedBytes:             o.maxBufTotal,
		MaxFetchBytes:                o.maxFetchBytes,
		AcceptJournalGap:             o.acceptGap,
		ControlKeys:                  controlKeys,
		ClockDrift:                   o.clockDrift,
		ExecutorID:                   o.executorID,
		Logger:                       log,
	}
	// The executor's own checks of its settings (--max-buffered and the
	// other bounds), before the data dir is locked or the embedded broker
	// starts: a bad flag is refused at once, not after a broker came up.
	probe := ccfg
	probe.Brokers = brokers
	if len(brokers) == 0 {
		probe.Brokers = []string{o.embeddedAddr}
	}
	if err := probe.Validate(); err != nil {
		return usageError{fmt.Errorf("consumer: config: %w", err)}
	}
	// The data dir is ours alone before anything opens it: a second
	// executor would otherwise fail deep in Pebble with a bare EAGAIN that
	// names neither the directory nor its holder.
	lock, err := dirlock.Acquire(o.dataDir)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	// Released after Pebble and the embedded broker closed (defers run
	// in reverse).
	defer func() { _ = lock.Release() }()
	if len(brokers) == 0 {
		b, err := broker.Start(ctx, o.embeddedAddr, filepath.Join(o.dataDir, "broker"), broker.WithLogger(log))
		if err != nil {
			return fmt.Errorf("embedded broker: %w", err)
		}
		defer b.Close()
		brokers = []string{b.Addr()}
		// WARN, not INFO: an executor meant for production that lost its
		// --brokers (an unset or misspelt ONCEFLIGHT_BROKERS) runs on
		// this in-process broker, and nothing else would say so.
		log.Warn("DEVELOPMENT BROKER: no --brokers given, so this executor runs on the embedded single-node broker; it is not for production. Set --brokers (or ONCEFLIGHT_BROKERS) to use Kafka or Redpanda",
			"addr", b.Addr(), "data_dir", filepath.Join(o.dataDir, "broker"))
	}
	if err := checkKafka(ctx, log, brokers, conn, cfg); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exOpts := append([]consumer.Option{consumer.WithRegisterer(reg)}, settingsOf(ctx).executorOptions()...)
	traceOpt, stopTracing, err := startTracing(ctx, log, o.executorID, readBuildInfo().Version)
	if err != nil {
		return err
	}
	if traceOpt != nil {
		exOpts = append(exOpts, traceOpt)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		stopTracing(sctx)
	}()
	cpOpt, err := o.checkpoints.option(o.kf.Topics.Journal)
	if err != nil {
		return err
	}
	exOpts = append(exOpts, cpOpt...)
	ccfg.Brokers = brokers
	applyMemoryLimit(log, o)
	ex, err := consumer.New(ccfg, cfg, exOpts...)
	if errors.Is(err, consumer.ErrState) {
		return err
	} else if err != nil {
		return usageError{err}
	}
	// Run closes the state when it returns; this releases it (and the data
	// dir) when serve fails before Run, e.g. an address in use.
	defer ex.Close()
	store := storeof.Executor(ex)
	stopTrimmer := startTrimmer(ctx, store, log)
	defer stopTrimmer() // before ex.Close, on the way out through an error

	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("--http %s: %w", o.httpAddr, err)
	}
	if o.pprofAddr != "" {
		if _, err := servePprof(ctx, o.pprofAddr, log); err != nil {
			return err
		}
	}
	acts, err := inspect.Describe(cfg, o.maxDataBytes, settingsOf(ctx).executorOptions()...)
	if err != nil {
		return err
	}
	redact := func(action string) []string {
		if a, ok := cfg.Action(action); ok {
			return a.Redact
		}
		return nil
	}
	// records is the API with the credentials a listener accepts.
	records := func(a *httpauth.Authenticator) http.Handler {
		return api.Handler(ex, store, reg, api.WithActions(acts), api.WithAuth(a), api.WithRedaction(redact))
	}
	srv := &http.Server{Handler: withCheckpoints(ex, records(auth)), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	servers := []*http.Server{srv}
	// On the way out through an error below; after the orderly Shutdown
	// at the end, Close has nothing left to do.
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	if o.http.metricsAddr != "" {
		msrv, mAddr, err := serveMetrics(o.http.metricsAddr, api.HealthHandler(ex, reg), log)
		if err != nil {
			return err
		}
		servers = append(servers, msrv)
		log.Info("health and metrics listening", "addr", mAddr)
	}
	if o.ingress.addr != "" {
		oc, err := client.New(client.WithBrokers(brokers...), client.WithKafkaOpts(conn...), client.WithTopics(schemas.Topics(o.kf.Topics)),
			client.WithSource(ingress.DefaultSource), client.WithLogger(log))
		if err != nil {
			return fmt.Errorf("ingress client: %w", err)
		}
		isrv, addr, err := startIngress(o.ingress, oc, cfg, o.maxDataBytes, auth, records, log)
		if err != nil {
			oc.Close()
			return err
		}
		// Shut down in order with the other listeners when Run returns;
		// on the way out through an error, its handlers stop before the
		// client they publish with is closed.
		servers = append(servers, isrv)
		defer func() {
			_ = isrv.Close()
			oc.Close()
		}()
		log.Info("ingress listening", "addr", addr, "token", o.ingress.tokenFile != "")
	}
	if o.consoleAddr != "" {
		// The console believes the journal records the executor itself
		// would (docs/console.md#signed-journals).
		tk := o.checkpoints.trusted
		addr, stop, err := startConsole(ctx, consoleOptions{addr: o.consoleAddr, dataDir: filepath.Join(o.dataDir, "console"), brokers: brokers, conn: conn,
			topics: o.kf.Topics, group: o.group, cfg: cfg, maxDataBytes: o.maxDataBytes, auth: auth, controlKeys: controlKeys,
			readOnly: o.consoleReadOnly, secureCookies: o.consoleSecure, trusted: tk, log: log})
		if err != nil {
			return err
		}
		defer stop()
		if o.consoleStarted != nil {
			o.consoleStarted(addr)
		}
	}
	log.Info("executor starting", "brokers", brokers, "kafka", o.kf.conf.String(), "group", o.group, "http", ln.Addr().String(),
		"http_auth", auth.Describe(), "actions", len(cfg.Actions))
	if o.started != nil {
		o.started(brokers, ln.Addr().String())
	}
	runErr := ex.Run(ctx)
	stopTrimmer()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	log.Info("executor stopped")
	return runErr
}
