// Package consumer is the executor: it consumes commands as a member of a
// consumer group, answers repeats from the dedupe index, runs new commands
// through their connector one entity at a time, and publishes records and
// outcomes transactionally with the consumed offsets.
//
// See DESIGN.md for goroutine ownership and what is durable before an offset
// commits; the short version is in the doc comments of Run and cycle.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/internal/config"
)

// errFenced means this process no longer owns a partition it tried to write
// for. It is expected during rebalances and after pauses; the work is left
// to the new owner.
var errFenced = errors.New("consumer: fenced: partition no longer owned by this executor")

// Executor runs commands. Create it with New and run it with Run.
type Executor struct {
	cfg       Config
	actions   map[string]*action
	retention retention
	reconcile struct{ every, window time.Duration }
	store     *dedupe.Store
	m         *metrics
	log       *slog.Logger
	opts      []kgo.Opt

	// plain is a non-transactional client: topic admin, epoch markers and
	// restore reads. The transactional session is owned by Run.
	plain  *kgo.Client
	nPart  int            // partitions of the commands (= journal) topic
	counts map[string]int // partitions per topic, for outbox routing

	mu    sync.Mutex
	parts map[int32]*partState // owned and restored partitions

	ready         atomic.Bool
	restoreFailed atomic.Bool
	sem           chan struct{}
	session       atomic.Pointer[kgo.GroupTransactSession]
}

// partState is what the owner of a partition keeps in memory. Fields other
// than lost are touched only by the Run goroutine and the intent writer,
// which never run a transaction at the same time.
type partState struct {
	epoch    int64
	tokenSeq int64
	lastHash string
	next     int64 // next journal offset (progress)
	lost     atomic.Bool
}

// Option configures an Executor.
type Option func(*Executor)

// WithRegisterer registers metrics on reg instead of the default registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(e *Executor) { e.m = newMetrics(reg) }
}

// WithKgoOpts adds franz-go options to every client (tests use it for
// short timeouts).
func WithKgoOpts(opts ...kgo.Opt) Option {
	return func(e *Executor) { e.opts = append(e.opts, opts...) }
}

// New builds an executor. It opens no connection; Run does.
func New(cfg Config, actions *config.Config, store *dedupe.Store, opts ...Option) (*Executor, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("consumer: config: %w", err)
	}
	acts, err := buildActions(actions, cfg)
	if err != nil {
		return nil, err
	}
	e := &Executor{cfg: cfg, actions: acts, store: store, log: cfg.Logger, parts: map[int32]*partState{}}
	if actions != nil {
		e.retention = retention{keep: actions.DedupeRetention, memory: actions.KeyMemory}
		e.reconcile.every, e.reconcile.window = actions.Reconcile.Every, actions.Reconcile.For
	}
	for _, o := range opts {
		o(e)
	}
	if e.m == nil {
		e.m = newMetrics(prometheus.DefaultRegisterer)
	}
	e.sem = make(chan struct{}, cfg.MaxInflight)
	return e, nil
}

// Ready reports whether the executor has joined its group, restored what it
// was assigned and is consuming.
func (e *Executor) Ready() bool { return e.ready.Load() }

// Store is the dedupe index, for the HTTP API.
func (e *Executor) Store() *dedupe.Store { return e.store }

// Owned lists the partitions this process owns now.
func (e *Executor) Owned() []int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps := make([]int32, 0, len(e.parts))
	for p := range e.parts {
		ps = append(ps, p)
	}
	return ps
}

// Run consumes until ctx is cancelled, then shuts down in order: stop
// fetching, let the cycle in flight finish (its executions, its transaction:
// outbox flushed and offsets committed together), leave the group, close the
// clients. Pebble is the caller's to close, after Run returns.
func (e *Executor) Run(ctx context.Context) error {
	var err error
	e.plain, err = kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(e.cfg.Brokers...),
		kgo.ProducerLinger(0),
		// Uncompressed: franz-go defaults to snappy, which common clients
		// (kafkajs without a codec plugin) cannot read.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, e.opts...)...)
	if err != nil {
		return fmt.Errorf("consumer: client: %w", err)
	}
	defer e.plain.Close()
	if err := e.ensureTopics(ctx); err != nil {
		return err
	}
	rctx, stopReconciler := context.WithCancel(ctx)
	defer stopReconciler()
	go e.reconcileLoop(rctx)
	for {
		sess, err := e.newSession()
		if err != nil {
			return err
		}
		e.session.Store(sess)
		err = e.consume(ctx, sess)
		e.ready.Store(false)
		// Close leaves the group, so a successor gets the partitions now
		// rather than after the session timeout.
		sess.Close()
		e.dropAll()
		if ctx.Err() != nil {
			return nil
		}
		// A session whose End failed is jammed (MEASURED: every later
		// Begin fails); recreate it.
		e.log.Warn("transaction session failed; recreating", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (e *Executor) ensureTopics(ctx context.Context) error {
	adm := kadm.NewClient(e.plain)
	for _, spec := range []struct {
		topic string
		parts int
	}{
		{e.cfg.Topics.Commands, e.cfg.Partitions},
		{e.cfg.Topics.Journal, e.cfg.Partitions},
		{e.cfg.Topics.Outcomes, e.cfg.Partitions},
		{e.cfg.Topics.Deadletter, 1},
	} {
		resp, err := adm.CreateTopic(ctx, int32(spec.parts), -1, nil, spec.topic)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("consumer: create topic %s: %w", spec.topic, err)
		}
		if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("consumer: create topic %s: %w", spec.topic, resp.Err)
		}
	}
	td, err := adm.ListTopics(ctx, e.cfg.Topics.Commands, e.cfg.Topics.Journal, e.cfg.Topics.Outcomes, e.cfg.Topics.Deadletter)
	if err != nil {
		return fmt.Errorf("consumer: describe topics: %w", err)
	}
	e.counts = map[string]int{}
	for t, d := range td {
		e.counts[t] = len(d.Partitions)
	}
	nc, nj := len(td[e.cfg.Topics.Commands].Partitions), len(td[e.cfg.Topics.Journal].Partitions)
	if nc == 0 || nc != nj {
		return fmt.Errorf("consumer: topics %s (%d partitions) and %s (%d) must have the same partition count",
			e.cfg.Topics.Commands, nc, e.cfg.Topics.Journal, nj)
	}
	e.nPart = nc
	return nil
}

func (e *Executor) newSession() (*kgo.GroupTransactSession, error) {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(e.cfg.Brokers...),
		kgo.ConsumerGroup(e.cfg.Group),
		kgo.ConsumeTopics(e.cfg.Topics.Commands),
		kgo.TransactionalID("onceflight-" + e.cfg.ExecutorID),
		kgo.TransactionTimeout(e.cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(e.cfg.SessionTimeout),
		kgo.ProducerLinger(0),
		// Uncompressed: franz-go defaults to snappy, which common clients
		// (kafkajs without a codec plugin) cannot read.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		// Every record's partition is chosen by outbox (murmur2 for keys,
		// the command's partition for the journal).
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.OnPartitionsAssigned(e.onAssigned),
		kgo.OnPartitionsRevoked(e.onRevoked),
		kgo.OnPartitionsLost(e.onRevoked),
	}, e.opts...)
	s, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("consumer: transaction session: %w", err)
	}
	return s, nil
}

// onAssigned restores each new partition before kgo starts fetching it:
// franz-go fetches a newly assigned partition's offsets only after this
// callback returns, so no command of p is processed before its records are
// in Pebble and a new epoch is in the journal.
func (e *Executor) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	for _, p := range assigned[e.cfg.Topics.Commands] {
		st, err := e.restore(ctx, cl, p)
		if err != nil {
			// Without a restore we must not process p: leave it out of
			// parts (every cycle with p's commands aborts) and have the
			// poll loop recreate the session, which rejoins the group
			// and restores again.
			e.log.Error("restore failed; rejoining the group", "partition", p, "err", err)
			e.restoreFailed.Store(true)
			continue
		}
		e.mu.Lock()
		e.parts[p] = st
		e.mu.Unlock()
	}
	e.ready.Store(true)
}

// onRevoked stops new work for the partitions at once. The transaction
// session aborts the cycle in flight; its executions were recorded as
// in_progress with deadlines, which the next owner honours.
func (e *Executor) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range revoked[e.cfg.Topics.Commands] {
		if st, ok := e.parts[p]; ok {
			st.lost.Store(true)
			delete(e.parts, p)
		}
	}
}

func (e *Executor) dropAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for p, st := range e.parts {
		st.lost.Store(true)
		delete(e.parts, p)
	}
}

func (e *Executor) part(p int32) *partState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.parts[p]
}

// checkMember proves that this process is still a member of the group's
// current generation, after a write it made. If it is, the write committed
// before any rebalance completed, so a new owner (who restores only after its
// assignment) will read it. REBALANCE_IN_PROGRESS is fine for the same
// reason: the next generation does not exist yet.
func (e *Executor) checkMember(ctx context.Context, cl *kgo.Client, p int32) error {
	if st := e.part(p); st == nil || st.lost.Load() {
		return errFenced
	}
	member, gen := cl.GroupMetadata()
	if member == "" || gen < 0 {
		return errFenced
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group = e.cfg.Group
	req.MemberID = member
	req.Generation = gen
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("consumer: membership check: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
		return fmt.Errorf("%w: %v", errFenced, err)
	}
	if st := e.part(p); st == nil || st.lost.Load() {
		return errFenced
	}
	return nil
}

// consume is the poll loop of one transaction session.
func (e *Executor) consume(ctx context.Context, sess *kgo.GroupTransactSession) error {
	for {
		fetches := sess.PollRecords(ctx, e.cfg.MaxPollRecords)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			e.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if n := len(fp.Records); n > 0 {
				e.m.lag.WithLabelValues(fmt.Sprint(fp.Partition)).Set(float64(fp.HighWatermark - fp.Records[n-1].Offset - 1))
			}
		})
		if e.restoreFailed.Swap(false) {
			return errors.New("a partition could not be restored")
		}
		recs := fetches.Records()
		if len(recs) == 0 {
			continue
		}
		// The cycle finishes even when ctx is cancelled: graceful shutdown
		// lets in-flight executions end and commits their outcomes.
		cctx := context.WithoutCancel(ctx)
		if err := e.runCycle(cctx, sess, recs); err != nil {
			return err
		}
	}
}
