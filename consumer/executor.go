// Package consumer is the executor: it consumes commands as a member of a
// consumer group, answers repeats from the dedupe index, runs new commands
// through their connector one entity at a time, and publishes records and
// outcomes transactionally with the consumed offsets.
//
// See DESIGN.md for goroutine ownership and what is durable before an offset
// commits; the short version is in the doc comments of pipeline and
// committer.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/kafkaconf"
	"github.com/onceflight/onceflight/schemas"
)

func init() {
	storeof.Executor = func(ex any) *dedupe.Store { return ex.(*Executor).store }
	storeof.Intents = func(ex any) []schemas.Record {
		if e, ok := ex.(*Executor); ok {
			if p := e.pipe.Load(); p != nil {
				return p.intents()
			}
		}
		return nil
	}
	storeof.Settled = func(ex any, ctx context.Context) error {
		if e, ok := ex.(*Executor); ok {
			if p := e.pipe.Load(); p != nil {
				return p.cm.settled(ctx)
			}
		}
		return nil
	}
}

// ErrState is returned by New when the executor's state cannot be opened
// (a disk problem or another process on DataDir), so that a caller can tell
// it from a configuration New refuses.
var ErrState = errors.New("consumer: cannot open the executor's state")

// restoreFailureLevel is how loud a failed restore is logged. A restore
// fenced because the partition moved on to another member (the group
// rebalanced while it ran, as when executors join one after another) is
// the group working, not a fault: Info, so operators' error alerts and the
// benchmark's log check do not count it. Anything else is an Error.
func restoreFailureLevel(err error) slog.Level {
	if errors.Is(err, errFenced) {
		return slog.LevelInfo
	}
	return slog.LevelError
}

// restoreFailureMsg names what happened to a restore that did not finish.
func restoreFailureMsg(err error) string {
	if errors.Is(err, errFenced) {
		return "restore stopped: partition moved to another member; rejoining the group"
	}
	return "restore failed; rejoining the group"
}

// errFenced means this process no longer owns a partition it tried to write
// for. It is expected during rebalances and after pauses; the work is left
// to the new owner.
var errFenced = errors.New("consumer: fenced: partition no longer owned by this executor")

// Executor runs commands. Create it with New and run it with Run.
//
// Its fields are grouped by owner, as partState's are: what New sets,
// what Run sets before any client exists, what mu guards, and what any
// goroutine reads and writes atomically.
type Executor struct {
	// Set by New (options included) and read-only after.
	cfg Config
	// tracer traces commands (tracing.go); nil when tracing is off.
	tracer    trace.Tracer
	actions   map[string]*action
	retention retention
	reconcile struct{ every, window time.Duration }
	store     *dedupe.Store   // opened by New, closed when Run returns
	storeOpts []dedupe.Option // tests: a failing disk (export_test.go)
	m         *metrics
	log       *slog.Logger
	opts      []kgo.Opt
	factories map[string]ConnectorFactory // WithConnector
	// refetchSem lets one read of skipped commands run at a time (skip.go).
	refetchSem chan struct{}
	// cp publishes signed checkpoints (WithCheckpoints); nil: none.
	cp *checkpointer
	// seals signs journal transactions and checks restores
	// (WithSignedJournal); nil: neither.
	seals *sealer

	// Set by Run (ensureTopics) before any client exists, read-only
	// after.
	//
	// plain is a non-transactional client: topic admin, epoch markers and
	// restore reads. The transactional group client is owned by Run.
	plain  *kgo.Client
	nPart  int            // partitions of the commands (= journal) topic
	counts map[string]int // partitions per topic, for outbox routing
	// obTopics places and size-checks what the committer publishes.
	obTopics outbox.Topics
	// commandsID is the commands topic's id (TxnOffsetCommit v6+).
	commandsID [16]byte
	// journalID is the journal topic's id (all zero if the brokers give
	// none): the store is bound to it (dedupe.Store.BindJournal).
	journalID [16]byte
	// statusTopic is false when the status topic could not be created
	// (status.go): nothing is published then.
	statusTopic bool

	// mu guards the partitions this executor holds: taken by the
	// franz-go callbacks, the HTTP server and the chores. Lock order:
	// DESIGN.md#lock-order.
	mu struct {
		sync.Mutex
		parts map[int32]*partState // owned and restored partitions
		// held are assigned partitions not processed, with the reason
		// (journal gap).
		held map[int32]error
	}
	// lag guards the partitions with a lag series (the lag chore's); a
	// leaf lock (DESIGN.md#lock-order).
	lag struct {
		sync.Mutex
		parts map[int32]bool
	}

	// Any goroutine, atomically.
	ready atomic.Bool
	// lastContact is when the group client last got an answer to a fetch,
	// a heartbeat, its assignment or a transactional write (Unix ns):
	// readiness requires one within the session timeout, so a lost broker
	// turns /readyz 503 (liveness.go).
	lastContact atomic.Int64
	// restoreFailed is set by onAssigned when a partition could not be
	// restored; cleared by Run for each new client.
	restoreFailed atomic.Bool
	// halted is why new work stopped for good (partition counts changed).
	halted atomic.Pointer[error]
	// pipe is the pipeline of the current group client, set by Run.
	pipe atomic.Pointer[pipeline]
	// closing is the client Run is closing: its pipeline is over, so its
	// restores still waiting for one give up (waitPipeline) instead of
	// holding Close until RestoreTimeout.
	closing atomic.Pointer[kgo.Client]
	// addedPartitions is set once the current client sent an
	// AddPartitionsToTxn (txnAddsHook): its transactions run the protocol
	// before KIP-890 part 2, so the group is added with AddOffsetsToTxn
	// (committer.commitOffsets).
	addedPartitions atomic.Bool
}

// Option configures an Executor.
type Option func(*Executor)

// WithRegisterer registers metrics on reg instead of the default registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(e *Executor) { e.m = newMetrics(reg) }
}

// New builds an executor of the actions (nil: none, the defaults of the
// actions file) and opens its state in cfg.DataDir. It opens no
// connection; Run does, and closes the state when it returns.
func New(cfg Config, actions *Actions, opts ...Option) (*Executor, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("consumer: config: %w", err)
	}
	e := &Executor{cfg: cfg, log: cfg.Logger, refetchSem: make(chan struct{}, 1)}
	e.mu.parts, e.mu.held = map[int32]*partState{}, map[int32]error{}
	e.opts = append([]kgo.Opt(nil), cfg.KafkaOpts...)
	e.retention = retention{keep: wire.DefaultDedupeRetention, memory: wire.DefaultKeyMemory}
	if actions != nil {
		e.retention = retention{keep: actions.DedupeRetention, memory: actions.KeyMemory}
		e.reconcile.every, e.reconcile.window = actions.Reconcile.Every, actions.Reconcile.For
	}
	for _, o := range opts {
		o(e)
	}
	acts, err := buildActions(actions, cfg, e.factories)
	if err != nil {
		return nil, err
	}
	if e.tracer != nil {
		for _, a := range acts {
			a.conn = traceConnector(a.conn, e.tracer)
		}
	}
	e.actions = acts
	if e.m == nil {
		e.m = newMetrics(prometheus.DefaultRegisterer)
	}
	names := make([]string, 0, len(acts))
	for n := range acts {
		names = append(names, n)
	}
	e.m.precreate(names)
	e.m.watchSystems(e.systemStats)
	// Last, so that nothing above leaves it open. Rebuilding on corruption
	// is safe because the journal is the truth and the index its cache.
	e.store, err = dedupe.Open(cfg.DataDir, append([]dedupe.Option{dedupe.WithLogger(cfg.Logger),
		dedupe.WithRebuildOnCorruption(), dedupe.WithCacheSize(cfg.CacheSize)}, e.storeOpts...)...)
	if err != nil {
		e.closeActions() // the kafka connectors' clients New started
		return nil, fmt.Errorf("%w (%s): %w", ErrState, cfg.DataDir, err)
	}
	e.m.mem.ex.Store(e)
	return e, nil
}

// Ready reports whether the executor has joined its group, restored what it
// was assigned and is consuming: not when it halted or holds a partition it
// cannot process.
func (e *Executor) Ready() bool {
	if !e.ready.Load() || e.halted.Load() != nil || e.store.Failed() != nil || !e.inContact() {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mu.held) == 0
}

// NotReady says why Ready is false ("" when it is not).
func (e *Executor) NotReady() string {
	if err := e.store.Failed(); err != nil {
		return "dedupe index failed, no work taken: " + err.Error() + "; restart on a healthy disk (the journal rebuilds the index)"
	}
	if err := e.haltReason(); err != nil {
		return "halted: " + err.Error()
	}
	if reason := e.heldReason(); reason != "" {
		return reason
	}
	// Lost contact is named before the membership it costs: it is the
	// cause an operator can act on. Before the first contact there is
	// none to lose (joining).
	if !e.inContact() && e.lastContact.Load() != 0 {
		return fmt.Sprintf("no answer from the brokers to a fetch, heartbeat or write for more than the session timeout (%s)", e.cfg.SessionTimeout)
	}
	if !e.ready.Load() {
		return "not a member of the consumer group with its partitions restored yet (joining, rejoining or restoring)"
	}
	return ""
}

// Owned lists the partitions this process owns now.
func (e *Executor) Owned() []int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps := make([]int32, 0, len(e.mu.parts))
	for p := range e.mu.parts {
		ps = append(ps, p)
	}
	return ps
}

// Close releases the state New opened, for an Executor that will not Run
// (its caller failed between New and Run): without it the data dir stays
// locked until the process exits. After Run it does nothing (Run closed
// the connectors and the state itself, and closing is done once). Close
// must not be called while Run is running.
func (e *Executor) Close() error {
	e.closeActions()
	return e.store.Close()
}

// closeActions closes what New opened for the actions (a kafka
// connector's own client).
func (e *Executor) closeActions() {
	for _, a := range e.actions {
		if a.close != nil {
			a.close()
			a.close = nil // Close after Run must not close a client twice
		}
	}
}

// Run consumes until ctx is cancelled, then shuts down in order: stop
// fetching, let running commands finish, commit their answers with the
// watermarks (one transaction), leave the group, stop the chores
// (reconciler, partition watch, gauges, prune) and wait for them, close
// the connectors and the clients, and last the state New opened. When Run
// returns nothing it started is running; an Executor runs once.
func (e *Executor) Run(ctx context.Context) error {
	// Deferred first, so it runs after everything else Run defers.
	defer func() {
		if err := e.store.Close(); err != nil {
			e.log.Error("closing the executor's state", "dir", e.cfg.DataDir, "err", err)
		}
	}()
	var err error
	e.plain, err = kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(e.cfg.Brokers...),
		kgo.ProducerLinger(0),
		kafkaconf.WireCompression(),
		kgo.ProducerBatchMaxBytes(int32(e.cfg.MaxMessageBytes)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, e.opts...)...)
	if err != nil {
		return fmt.Errorf("consumer: client: %w", err)
	}
	defer e.plain.Close()
	defer e.closeActions()
	if err := e.ensureTopics(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: not a failure
		}
		return err
	}
	// Before anything reads the store: a data dir of another journal
	// would restore on from offsets of that journal.
	if _, err := e.store.BindJournal(e.cfg.Topics.Journal, e.journalID); err != nil {
		return fmt.Errorf("%w (%s): %w", ErrState, e.cfg.DataDir, err)
	}
	if e.seals != nil {
		if err := e.seals.validate(); err != nil {
			return err
		}
	}
	if e.cp != nil {
		if err := e.cp.start(ctx); err != nil {
			return err
		}
		defer e.cp.stop() // after the loop below: publishes what it wrote
	}
	// The chores run until Run ends, and Run waits for them: deferred
	// after the actions' close and the plain client's, so they run first
	// (stop, then wait), and nothing of the executor is left running when
	// the caller closes the store.
	rctx, stopChores := context.WithCancel(ctx)
	var chores sync.WaitGroup
	defer chores.Wait()
	defer stopChores()
	chores.Go(func() { every(rctx, e.reconcile.every, func() { e.reconcileOnce(rctx) }) })
	chores.Go(func() { e.watchPartitions(rctx, e.cfg.PartitionCheckInterval) })
	chores.Go(func() { every(rctx, time.Second, e.refreshGauges) })
	chores.Go(func() { e.publishStatus(rctx) })
	chores.Go(func() { every(rctx, time.Minute, func() { e.prune(rctx) }) })
	for {
		cl, err := e.newClient()
		if err != nil {
			return err
		}
		if err := e.initProducer(ctx, cl); err != nil {
			// The client joins the group as it is created: restores
			// that its assignment started must not wait for a pipeline.
			e.closing.Store(cl)
			cl.Close()
			return err
		}
		e.restoreFailed.Store(false) // a new session restores afresh
		err = e.consume(ctx, cl)
		e.ready.Store(false)
		ferr := e.store.Failed()
		if ferr != nil && ctx.Err() == nil {
			// Say why before letting go of the partitions: whoever
			// sees this executor own nothing sees the reason with it.
			stopChores()
			chores.Wait()
			e.storeFailed(ferr)
		}
		e.closing.Store(cl)
		// Close leaves the group (its revoke callback flushes nothing
		// more: the pipeline is stopped), so a successor gets the
		// partitions now rather than after the session timeout.
		cl.Close()
		e.dropAll()
		if ctx.Err() != nil {
			return nil
		}
		if ferr != nil {
			<-ctx.Done()
			return nil
		}
		// EndTransaction failed or a partition could not be restored:
		// the producer or our view is in an unknown state. Start over
		// with a new client, which rejoins and restores.
		e.log.Warn("executor client failed; recreating it", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// storeFailed is the end of an executor whose dedupe index can no longer
// write: records that committed in the journal may be missing from the
// index, so nothing may be answered from it. Run has left the group (the
// partitions go to other instances, which restore them from the journal)
// and stays up only to say why, in /readyz, the log and
// onceflight_store_failed, until it is stopped.
func (e *Executor) storeFailed(err error) {
	e.m.storeFailed.Set(1)
	e.m.ready.Set(0) // refreshGauges has stopped with the reconciler
	e.log.Error("dedupe index failed: this executor stopped taking work and leaves its group; other instances take its partitions. Restart it on a healthy disk: the journal rebuilds the index", "err", err)
}

// initProducer loads the client's producer id before it joins the group,
// so that a broker refusing the transactional id for good (no ACL for it,
// a transaction timeout above transaction.max.timeout.ms) ends Run with
// that answer instead of a loop of clients that can never commit. A
// retriable error or an unreachable broker is left to the session, which
// tries again.
func (e *Executor) initProducer(ctx context.Context, cl *kgo.Client) error {
	ictx, cancel := context.WithTimeout(ctx, e.cfg.RestoreTimeout)
	defer cancel()
	_, _, err := cl.ProducerID(ictx)
	var ke *kerr.Error
	if err == nil || !errors.As(err, &ke) || ke.Retriable {
		return nil
	}
	hint := ""
	switch ke {
	case kerr.TransactionalIDAuthorizationFailed, kerr.ClusterAuthorizationFailed:
		hint = " (the principal needs WRITE and DESCRIBE on the transactional id: ACLs)"
	case kerr.InvalidTransactionTimeout:
		hint = fmt.Sprintf(" (the transaction timeout, %s, must not exceed the brokers' transaction.max.timeout.ms)", e.cfg.TransactionTimeout)
	}
	return fmt.Errorf("consumer: the brokers refused transactional id %q: %w%s", e.txnID(), err, hint)
}

func (e *Executor) txnID() string { return "onceflight-" + e.cfg.ExecutorID }

// fetchMaxWait is how long the broker may hold the executor's fetch
// when no partition in it has records: the longest a resumed partition
// waits for its first fetch. An idle executor then asks 4 times a second
// instead of once every 5 s.
const fetchMaxWait = 250 * time.Millisecond

func (e *Executor) newClient() (*kgo.Client, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(e.cfg.Brokers...),
		kgo.ConsumerGroup(e.cfg.Group),
		kgo.ConsumeTopics(e.cfg.Topics.Commands),
		// Offsets are committed only inside transactions (committer).
		kgo.DisableAutoCommit(),
		kgo.TransactionalID(e.txnID()),
		kgo.TransactionTimeout(e.cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(e.cfg.SessionTimeout),
		// At most a third of the session (Kafka's advice; franz-go's 3 s
		// default is more than a short session): readiness needs a recent
		// answer, and the group needs a heartbeat before the session ends.
		kgo.HeartbeatInterval(min(3*time.Second, e.cfg.SessionTimeout/3)),
		kgo.ProducerLinger(0),
		kafkaconf.WireCompression(),
		kgo.ProducerBatchMaxBytes(int32(e.cfg.MaxMessageBytes)),
		kgo.FetchMaxPartitionBytes(int32(max(e.cfg.MaxMessageBytes, 1<<20))),
		// What franz-go holds ahead of the poll loop (memory.go): at most
		// this many responses of at most this size (the default is one
		// 50 MiB response per broker).
		kgo.FetchMaxBytes(int32(e.cfg.MaxFetchBytes)),
		kgo.MaxConcurrentFetches(e.cfg.MaxConcurrentFetches),
		// A partition paused at its buffer bound (checkPause) is resumed
		// into the next fetch request, not the one in flight; with the
		// other partitions idle, that one is a long poll held by the
		// broker for up to this long. At franz-go's 5 s default a drain's
		// last partition sat idle for 4 s after its resume (BENCHMARKS.md,
		// "Round 13 (http)").
		kgo.FetchMaxWait(fetchMaxWait),
		// Every record's partition is chosen by outbox (murmur2 for keys,
		// the command's partition for the journal).
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.OnPartitionsAssigned(e.onAssigned),
		kgo.OnPartitionsRevoked(e.onRevoked),
		kgo.OnPartitionsLost(e.onLost),
		kgo.WithHooks(contactHook{e}, txnAddsHook{&e.addedPartitions}),
		// Transaction markers are handed to dispatch, which counts their
		// offsets as answered: otherwise the watermark stops before a
		// trailing marker and the lag never reaches 0.
		kgo.KeepControlRecords(),
	}, e.opts...)
	e.addedPartitions.Store(false)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("consumer: client: %w", err)
	}
	return cl, nil
}

// onAssigned restores each new partition before kgo starts fetching it:
// franz-go fetches a newly assigned partition's offsets only after this
// callback returns, so no command of p is processed before its records are
// in Pebble and a new epoch is in the journal. Partitions are restored in
// parallel, all within RestoreTimeout, so the callback ends well within the
// rebalance it belongs to; an epoch marker written after that would be
// refused by its fence anyway.
func (e *Executor) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	// The membership this assignment belongs to. Partitions held under
	// another one were kept by the client across an eviction: another
	// member may have owned them meanwhile, so their state is stale.
	// Drop them and rejoin from nothing, so that every partition is
	// restored before it is processed. Checked before anything else: an
	// assignment that adds no partition may keep stale ones, and one that
	// adds some need not restore them, since the rejoin restores all.
	if stale := e.partsOfOtherMember(cl); len(stale) > 0 {
		e.log.Warn("partitions kept across a new group membership: dropped, and the group is joined again so that they are restored first",
			"partitions", stale)
		e.release(stale)
		e.rejoin(fmt.Errorf("partitions %v kept across a new group membership", stale))
		return
	}
	ps := assigned[e.cfg.Topics.Commands]
	if len(ps) == 0 {
		e.ready.Store(true)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RestoreTimeout)
	defer cancel()
	// A restarted executor keeps its transactional id: loading the
	// producer id now aborts the transaction its previous incarnation left
	// open, instead of restores waiting for it to time out.
	if _, _, err := cl.ProducerID(rctx); err != nil {
		e.log.Warn("init producer id before restore", "err", err)
	}
	as, err := e.loadAssignment(rctx)
	if err != nil {
		e.log.Log(ctx, restoreFailureLevel(err), restoreFailureMsg(err), "partitions", ps, "err", err)
		e.restoreFailed.Store(true)
		e.rejoinAfterFailedRestore()
		return
	}
	// The membership the restores and their epoch markers belong to:
	// fixed while this callback runs (the client joins again only after
	// it returns).
	as.member, _ = cl.GroupMetadata()
	var wg sync.WaitGroup
	slots := make(chan struct{}, e.cfg.RestoreParallelism)
	for _, p := range ps {
		if int(p) >= e.nPart {
			// The topic grew under us (watchPartitions halts): this
			// partition has no journal partition to restore from.
			e.hold(cl, p, fmt.Errorf("partition %d is beyond the %d partitions the executor started with", p, e.nPart))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			st, err := e.restore(rctx, cl, as, p)
			if errors.Is(err, errJournalGap) || errors.Is(err, errJournalBehind) || errors.Is(err, errUnsigned) {
				e.hold(cl, p, err)
				return
			}
			if err != nil {
				// Without a restore we must not process p: leave it out
				// of parts (its records are not dispatched) and have the
				// poll loop recreate the session, which rejoins the
				// group and restores again.
				e.log.Log(ctx, restoreFailureLevel(err), restoreFailureMsg(err), "partition", p, "err", err)
				e.restoreFailed.Store(true)
				return
			}
			// A pause is kept by the client across assignments: a
			// partition held or paused under an earlier ownership would
			// otherwise never be fetched again.
			cl.ResumeFetchPartitions(map[string][]int32{e.cfg.Topics.Commands: {p}})
			st.member = as.member
			e.install(p, st)
		}()
	}
	wg.Wait()
	if e.restoreFailed.Load() {
		e.rejoinAfterFailedRestore()
		return
	}
	e.ready.Store(true)
}

// rejoinAfterFailedRestore marks the executor not ready and ends the poll
// loop now rather than when the next poll returns (on an idle topic that
// could be minutes): the loop recreates the client, which rejoins and
// restores again from the progress made so far.
func (e *Executor) rejoinAfterFailedRestore() {
	e.rejoin(errors.New("a partition could not be restored"))
}

// rejoin marks the executor not ready and ends the poll loop with cause:
// the loop recreates the client, which joins the group with no
// partitions and restores every one it is given.
func (e *Executor) rejoin(cause error) {
	e.ready.Store(false)
	if p := e.pipe.Load(); p != nil {
		select {
		case p.broken <- cause:
		default:
		}
	}
}

// heldReason names one held partition and why, "" if none is held.
func (e *Executor) heldReason() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for p, err := range e.mu.held {
		return fmt.Sprintf("partition %d held: %v", p, err)
	}
	return ""
}

// hold keeps an assigned partition unprocessed: its fetching is paused and
// its offsets stay where they are, so nothing of it is lost while an
// operator looks. The reason is logged as an ERROR and shown by readyz.
func (e *Executor) hold(cl *kgo.Client, p int32, reason error) {
	e.log.Error("partition held: not processing it", "partition", p, "err", reason)
	cl.PauseFetchPartitions(map[string][]int32{e.cfg.Topics.Commands: {p}})
	e.mu.Lock()
	e.mu.held[p] = reason
	e.mu.Unlock()
}

// onRevoked hands partitions over cleanly (cooperative-sticky: this runs
// before the partitions are assigned to anyone else): stop starting new
// work for them, let running commands finish within RevokeTimeout, commit
// their answers and the watermark, then let go. What does not finish in
// time stays in_progress in the journal; the next owner inherits it.
func (e *Executor) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ps := revoked[e.cfg.Topics.Commands]
	if len(ps) == 0 {
		return
	}
	if p := e.pipe.Load(); p != nil {
		dctx, cancel := context.WithTimeout(ctx, e.cfg.RevokeTimeout)
		for _, n := range ps {
			if st := e.part(n); st != nil {
				if err := p.drainPartition(dctx, st); err != nil {
					e.log.Warn("revocation: commands still running are left to the next owner", "err", err)
				}
			}
		}
		if err := p.cm.flushNow(dctx); err != nil {
			e.log.Warn("revocation: final commit failed; the next owner consumes those commands again", "err", err)
		}
		cancel()
	}
	e.release(ps)
}

// onLost drops partitions at once: another member may own them already,
// so nothing more may be written for them (the committer drops their
// staged work, and their running commands are cancelled).
func (e *Executor) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	// The membership is gone, whatever this process still hears from the
	// brokers: a fetch answered after a network fault heals restores
	// contact before the group has taken this member back. Ready again
	// only when a new assignment is restored (onAssigned).
	e.ready.Store(false)
	if ps := lost[e.cfg.Topics.Commands]; len(ps) > 0 {
		e.log.Warn("ownership lost (session expired or fenced): running commands of these partitions are cancelled and their answers dropped; their new owner settles them",
			"partitions", ps)
		e.release(ps)
	}
}

// install makes st partition p's state, restored for a new ownership.
// A state it replaces is marked lost first: a record polled under it is
// not dispatched to st (pipeline.dispatch).
func (e *Executor) install(p int32, st *partState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, ok := e.mu.parts[p]; ok {
		old.lost.Store(true)
		old.cancel()
	}
	delete(e.mu.held, p)
	e.mu.parts[p] = st
}

func (e *Executor) release(ps []int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range ps {
		delete(e.mu.held, p)
		if st, ok := e.mu.parts[p]; ok {
			st.lost.Store(true)
			st.cancel()
			delete(e.mu.parts, p)
		}
	}
}

func (e *Executor) dropAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for p, st := range e.mu.parts {
		st.lost.Store(true)
		st.cancel()
		delete(e.mu.parts, p)
	}
	clear(e.mu.held)
}

// partsOfOtherMember lists the partitions held under a group member id
// other than cl's now; the client is asked only if some are held.
func (e *Executor) partsOfOtherMember(cl *kgo.Client) []int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.mu.parts) == 0 {
		return nil
	}
	member, _ := cl.GroupMetadata()
	var out []int32
	for p, st := range e.mu.parts {
		if st.member != member {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func (e *Executor) part(p int32) *partState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.parts[p]
}

func (e *Executor) ownedStates() []*partState {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*partState, 0, len(e.mu.parts))
	for _, st := range e.mu.parts {
		out = append(out, st)
	}
	return out
}

// errStopped is the cause of a poll loop that ended because the executor
// was asked to stop (not a failure).
var errStopped = errors.New("executor stopping")

// consume is the poll loop of one client's lifetime. Every way it can end
// badly — the committer's fatal error, a command that could not be
// answered, a failed restore — cancels the poll context with its cause;
// the cause is what consume returns.
func (e *Executor) consume(ctx context.Context, cl *kgo.Client) error {
	p := newPipeline(e, cl)
	e.pipe.Store(p)
	defer e.pipe.Store(nil)
	cmCtx, stopCM := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCM()
	pollCtx, stopPoll := context.WithCancelCause(ctx)
	defer stopPoll(errStopped)
	// However the poll loop ends, stop begins then, not once it returned:
	// it may be waiting for staged room (pipeline.beginStop).
	defer context.AfterFunc(pollCtx, p.beginStop)()
	cmDone := make(chan struct{})
	var cmErr error // read after cmDone
	go func() {
		defer close(cmDone)
		if cmErr = p.cm.loop(cmCtx); cmErr != nil {
			stopPoll(cmErr)
		}
	}()
	watchDone := make(chan struct{})
	defer func() {
		stopPoll(errStopped) // a no-op if the poll context ended already
		<-watchDone
	}()
	go func() {
		defer close(watchDone)
		trim := time.NewTicker(keepIdleAfter)
		defer trim.Stop()
		unpark := time.NewTicker(parkTick)
		defer unpark.Stop()
		for {
			select {
			case err := <-p.broken:
				stopPoll(err)
				return
			case <-e.store.Failure():
				stopPoll(e.store.Failed())
				return
			case <-pollCtx.Done():
				return
			case <-trim.C:
				p.trimIdle()
			case <-unpark.C:
				p.unparkTick()
			}
		}
	}()
	for {
		p.waitRoom(pollCtx)
		fetches := cl.PollRecords(pollCtx, e.cfg.MaxPollRecords)
		if pollCtx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		if e.restoreFailed.Swap(false) {
			stopPoll(errors.New("a partition could not be restored"))
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			e.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		})
		p.dispatchPoll(fetches)
	}
	fatal := context.Cause(pollCtx)
	if errors.Is(fatal, errStopped) || (fatal != nil && ctx.Err() != nil && errors.Is(fatal, ctx.Err())) {
		fatal = nil
	}
	// Graceful: running commands finish (their contexts are not the
	// poll's), their answers and the watermarks are committed.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RevokeTimeout+5*time.Second)
	defer cancel()
	if err := p.stop(sctx); err != nil && fatal == nil {
		e.log.Warn("final commit on shutdown failed; uncommitted commands will be consumed again", "err", err)
	}
	stopCM()
	<-cmDone
	if fatal == nil {
		// The committer may have failed during the final commit, after
		// the poll context ended for another reason.
		fatal = cmErr
	}
	return fatal
}
