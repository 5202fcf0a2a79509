package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// Projection keeps the console's index of every execution up to date with
// the journal and outcome topics of all partitions. It reads them with its
// own direct consumer (no consumer group: joining the executors' group
// would take partitions from them, and a group of its own would only
// store the positions that the index already keeps atomically with what
// they produced), read_committed, so an aborted write of a fenced zombie
// never shows.
type Projection struct {
	db      *pebble.DB
	brokers []string
	kopts   []kgo.Opt
	topics  schemas.Topics
	group   string
	log     *slog.Logger
	every   time.Duration

	// trusted, when set, makes journal records count only once a
	// trusted executor seal covers them (seals.go); seals is each
	// journal partition's checking, used by Run's goroutine only.
	trusted      *trust.TrustedKeys
	originPrefix string
	seals        map[int32]*partSeals

	// mu guards the fields in it: the live view of the cluster that the
	// stats loop refreshes, and the subscribers of changes.
	mu struct {
		sync.Mutex
		stats   Stats
		lastW   map[int32]string // partition -> executor of its latest journal record
		pos     map[string]map[int32]int64
		subs    map[chan struct{}]struct{}
		version uint64
		bad     int // undecodable entries skipped
		// sealsSeen: the journal carries executor seals that this
		// projection, without trusted keys, does not check.
		sealsSeen bool
		applied   int64 // journal and outcome entries applied since open
	}
	// st guards the executors' statuses (status.go); taken after mu when
	// both are.
	st struct {
		sync.Mutex
		status map[string]schemas.ExecutorStatus // each executor's latest
		bad    int                               // undecodable status records skipped
	}
}

// ProjectionOption configures OpenProjection.
type ProjectionOption func(*Projection)

// WithKafkaOpts adds connection settings (TLS, SASL) to the reader.
func WithKafkaOpts(o ...kgo.Opt) ProjectionOption {
	return func(p *Projection) { p.kopts = append(p.kopts, o...) }
}

// WithTopics sets the topic names (default schemas.DefaultTopics()).
func WithTopics(t schemas.Topics) ProjectionOption {
	return func(p *Projection) { p.topics = t.WithDefaults() }
}

// WithGroup names the executors' consumer group, whose members the
// overview shows as partition owners (default "onceflight").
func WithGroup(g string) ProjectionOption { return func(p *Projection) { p.group = g } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) ProjectionOption { return func(p *Projection) { p.log = l } }

// OpenProjection opens (or creates) the index under dir for the cluster
// of brokers. Run keeps it up to date; Close closes it.
func OpenProjection(dir string, brokers []string, opts ...ProjectionOption) (*Projection, error) {
	if len(brokers) == 0 {
		return nil, errors.New("console: no brokers")
	}
	p := &Projection{brokers: brokers, topics: schemas.DefaultTopics(), group: "onceflight", log: slog.Default(), every: 2 * time.Second}
	for _, o := range opts {
		o(p)
	}
	p.topics = p.topics.WithDefaults()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("console: open index %s: %w", dir, err)
	}
	p.db = db
	p.mu.lastW = map[int32]string{}
	p.mu.pos = map[string]map[int32]int64{}
	p.st.status = map[string]schemas.ExecutorStatus{}
	p.mu.subs = map[chan struct{}]struct{}{}
	if p.originPrefix == "" {
		p.originPrefix = "onceflight/" + p.topics.Journal
	}
	_, seen, err := getUint(db, []byte{pfxSealsSeen})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	p.mu.sealsSeen = seen
	return p, nil
}

// Close closes the index; call it after Run returned.
func (p *Projection) Close() error {
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("console: close index: %w", err)
	}
	return nil
}

// Subscribe returns a channel that receives (without blocking the
// projection: one pending signal at most) whenever the index changed, and
// a function that ends the subscription.
func (p *Projection) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.mu.subs[ch] = struct{}{}
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		delete(p.mu.subs, ch)
		p.mu.Unlock()
	}
}

// Version counts the batches applied since start; pages carry it so a
// browser can tell whether what it shows is current.
func (p *Projection) Version() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.version
}

func (p *Projection) notify() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.version++
	for ch := range p.mu.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Run reads the topics into the index until ctx ends; it waits for the
// topics to exist (an executor creates them). It returns nil when ctx
// ends and an error only when the index cannot be written.
func (p *Projection) Run(ctx context.Context) error {
	admCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.brokers...)}, p.kopts...)...)
	if err != nil {
		return fmt.Errorf("console: kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	parts, err := p.waitTopics(ctx, adm)
	if err != nil {
		return nil //nolint:nilerr // ctx ended while waiting
	}
	if p.trusted != nil {
		if err := p.dropPending(); err != nil {
			return err
		}
		p.seals = map[int32]*partSeals{}
	} else if err := p.dropTrustedSeals(); err != nil {
		return err
	}
	start := map[string]map[int32]kgo.Offset{}
	for topic, ps := range parts {
		start[topic] = map[int32]kgo.Offset{}
		p.mu.Lock()
		p.mu.pos[topic] = map[int32]int64{}
		p.mu.Unlock()
		for _, part := range ps {
			n, ok, err := getUint(p.db, posKey(topic, part))
			if err != nil {
				return err
			}
			if p.trusted != nil && topic == p.topics.Journal {
				if p.seals[part], err = p.openPartSeals(part, int64(n)); err != nil {
					return err
				}
			}
			if ok {
				start[topic][part] = kgo.NewOffset().At(int64(n))
				p.mu.Lock()
				p.mu.pos[topic][part] = int64(n)
				p.mu.Unlock()
			} else {
				start[topic][part] = kgo.NewOffset().AtStart()
			}
		}
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(p.brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records are kept so the stored position passes the
		// commit marker after a transaction's last record: otherwise a
		// caught-up partition would always look one behind.
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(start),
		// Retention may have deleted what the index stopped at.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A transaction's commit makes its records visible without a
		// new produce, and a broker may answer a waiting read_committed
		// fetch only at its max wait: keep that short so the console
		// shows a commit within a fraction of a second.
		kgo.FetchMaxWait(250 * time.Millisecond),
	}, p.kopts...)...)
	if err != nil {
		return fmt.Errorf("console: kafka reader: %w", err)
	}
	defer cl.Close()
	statsDone := make(chan struct{})
	go func() {
		defer close(statsDone)
		p.statsLoop(ctx, adm)
	}()
	defer func() { <-statsDone }()
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		p.statusLoop(ctx)
	}()
	defer func() { <-statusDone }()
	p.log.Info("console projection reading", "journal", p.topics.Journal, "outcomes", p.topics.Outcomes,
		"partitions", len(parts[p.topics.Journal]))
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("console projection: fetch", "topic", t, "partition", part, "err", err)
			}
		})
		if fs.NumRecords() == 0 {
			continue
		}
		if err := p.apply(fs); err != nil {
			return err
		}
	}
}

// waitTopics returns the partitions of the journal and outcome topics,
// waiting until both exist.
func (p *Projection) waitTopics(ctx context.Context, adm *kadm.Client) (map[string][]int32, error) {
	for {
		td, err := adm.ListTopics(ctx, p.topics.Journal, p.topics.Outcomes)
		if err == nil && td.Has(p.topics.Journal) && td.Has(p.topics.Outcomes) && td.Error() == nil {
			out := map[string][]int32{}
			for _, t := range []string{p.topics.Journal, p.topics.Outcomes} {
				out[t] = td[t].Partitions.Numbers()
			}
			return out, nil
		}
		p.log.Info("console projection: waiting for the topics", "journal", p.topics.Journal, "outcomes", p.topics.Outcomes)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// apply writes one fetch into the index in one batch with the positions
// it reached: a crash loses the whole batch or none of it, and the next
// start reads from the positions that agree with the data.
func (p *Projection) apply(fs kgo.Fetches) error {
	b := p.db.NewIndexedBatch()
	defer b.Close()
	var bad int
	var n int64
	lastW := map[int32]string{}
	pos := map[string]map[int32]int64{}
	var err error
	p.mu.Lock()
	sealsSeen := p.mu.sealsSeen
	p.mu.Unlock()
	newlySeen := false
	fs.EachPartition(func(ft kgo.FetchTopicPartition) {
		if err != nil || len(ft.Records) == 0 {
			return
		}
		next := ft.Records[len(ft.Records)-1].Offset + 1
		resume := next
		if ps := p.seals[ft.Partition]; ps != nil && ft.Topic == p.topics.Journal {
			for _, rec := range ft.Records {
				if !rec.Attrs.IsControl() {
					n++
				}
				ps.add(rec)
			}
			var w string
			if w, resume, err = p.applySealed(b, ps, next); err != nil {
				return
			}
			if w != "" {
				lastW[ft.Partition] = w
			}
			ft.Records = nil
		}
		for _, rec := range ft.Records {
			if rec.Attrs.IsControl() {
				continue
			}
			n++
			var e error
			switch ft.Topic {
			case p.topics.Journal:
				if !sealsSeen && wire.JournalKind(rec) == schemas.KindSeal {
					sealsSeen = true
				}
				var w string
				w, e = p.applyJournal(b, rec)
				if w != "" {
					lastW[rec.Partition] = w
				}
			case p.topics.Outcomes:
				e = p.applyOutcome(b, rec)
			}
			if errors.Is(e, errUndecodable) {
				bad++
				p.log.Warn("console projection: skipped an entry it cannot decode", "topic", ft.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", e)
				continue
			}
			if e != nil {
				err = e
				return
			}
		}
		if pos[ft.Topic] == nil {
			pos[ft.Topic] = map[int32]int64{}
		}
		pos[ft.Topic][ft.Partition] = next
		err = setUint(b, posKey(ft.Topic, ft.Partition), uint64(resume))
	})
	if err != nil {
		return err
	}
	if sealsSeen && p.trusted == nil {
		p.mu.Lock()
		newlySeen = !p.mu.sealsSeen
		p.mu.Unlock()
		if newlySeen {
			if err := setUint(b, []byte{pfxSealsSeen}, 1); err != nil {
				return err
			}
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("console: write index: %w", err)
	}
	p.mu.Lock()
	maps.Copy(p.mu.lastW, lastW)
	for t, m := range pos {
		if p.mu.pos[t] == nil {
			p.mu.pos[t] = map[int32]int64{}
		}
		maps.Copy(p.mu.pos[t], m)
	}
	p.mu.bad += bad
	p.mu.sealsSeen = p.mu.sealsSeen || newlySeen
	p.mu.applied += n
	p.mu.Unlock()
	p.notify()
	return nil
}

var errUndecodable = errors.New("undecodable")

// applyJournal applies one journal entry and returns the executor that
// wrote it ("" for other kinds of entries).
func (p *Projection) applyJournal(b *pebble.Batch, rec *kgo.Record) (string, error) {
	if wire.JournalKind(rec) != schemas.KindRecord {
		return "", nil // epoch markers and the like
	}
	if rec.Value == nil {
		return "", p.forgetKey(b, string(rec.Key))
	}
	r, err := schemas.UnmarshalRecord(rec.Value)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUndecodable, err)
	}
	id := execID(r.Entity, r.IdempotencyKey)
	e, err := getJSON[Execution](b, withPrefix(pfxExec, id))
	if err != nil {
		return "", err
	}
	if e == nil {
		e = &Execution{Entity: r.Entity, Key: r.IdempotencyKey, FirstAt: rec.Timestamp}
	}
	released := r.Release != nil
	if !e.Journal || e.Status != r.Status || e.Released != released {
		e.Since = rec.Timestamp
	}
	e.Journal = true
	e.Action, e.Status, e.Released, e.Attempts = r.Action, r.Status, released, r.Attempts
	e.CommandID, e.Error, e.Evidence = r.Command.ID, r.Error, r.Evidence
	e.UpdatedAt, e.Partition, e.Offset = rec.Timestamp, rec.Partition, rec.Offset
	st := storedStep{Source: "journal", Partition: rec.Partition, Offset: rec.Offset, Time: rec.Timestamp, Record: &r}
	if err := setJSON(b, stepKey(id, srcJournal, rec.Partition, rec.Offset), st); err != nil {
		return "", err
	}
	if err := b.Set(withPrefix(pfxKey, enc(nil, r.IdempotencyKey), enc(nil, r.Entity)), nil, nil); err != nil {
		return "", err
	}
	if r.Command.ID != "" {
		if err := b.Set(withPrefix(pfxCommand, enc(nil, r.Command.ID), id), nil, nil); err != nil {
			return "", err
		}
	}
	return r.Executor, p.putExec(b, id, e)
}

// putExec stores e and moves its entry in the waiting index.
func (p *Projection) putExec(b *pebble.Batch, id []byte, e *Execution) error {
	if e.WaitKey != nil {
		if err := b.Delete(e.WaitKey, nil); err != nil {
			return err
		}
		e.WaitKey = nil
	}
	if e.Waiting() {
		e.WaitKey = waitKey(e.Since, id)
		if err := b.Set(e.WaitKey, nil, nil); err != nil {
			return err
		}
	}
	return setJSON(b, withPrefix(pfxExec, id), e)
}

// forgetKey applies a journal tombstone: the key is forgotten for every
// entity, as compaction would forget it.
func (p *Projection) forgetKey(b *pebble.Batch, key string) error {
	pfx := withPrefix(pfxKey, enc(nil, key))
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return fmt.Errorf("console index: %w", err)
	}
	var ents []string
	for it.First(); it.Valid(); it.Next() {
		ent, _, err := dec(it.Key()[len(pfx):])
		if err == nil {
			ents = append(ents, ent)
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("console index: %w", err)
	}
	for _, ent := range ents {
		id := execID(ent, key)
		e, err := getJSON[Execution](b, withPrefix(pfxExec, id))
		if err != nil {
			return err
		}
		if e != nil && e.WaitKey != nil {
			if err := b.Delete(e.WaitKey, nil); err != nil {
				return err
			}
		}
		sp := withPrefix(pfxStep, id)
		if err := b.DeleteRange(sp, prefixEnd(sp), nil); err != nil {
			return err
		}
		if err := b.Delete(withPrefix(pfxExec, id), nil); err != nil {
			return err
		}
		if err := b.Delete(withPrefix(pfxKey, enc(nil, key), enc(nil, ent)), nil); err != nil {
			return err
		}
	}
	return nil
}

func (p *Projection) applyOutcome(b *pebble.Batch, rec *kgo.Record) error {
	o, err := schemas.DecodeOutcome(rec)
	if err != nil {
		return fmt.Errorf("%w: %w", errUndecodable, err)
	}
	ent, key := cmp.Or(o.Subject, o.Record.Entity), cmp.Or(o.IdempotencyKey, o.Record.IdempotencyKey)
	id := execID(ent, key)
	st := storedStep{Source: "outcomes", Partition: rec.Partition, Offset: rec.Offset, Time: rec.Timestamp,
		EventID: o.ID, CommandID: o.CausationID, Status: o.Record.Status, Replayed: o.Replayed, Hash: o.Record.Hash}
	if o.Record.Error != nil {
		st.ErrorCode = o.Record.Error.Code
	}
	if err := setJSON(b, stepKey(id, srcOutcomes, rec.Partition, rec.Offset), st); err != nil {
		return err
	}
	ck := withPrefix(pfxCount, []byte(o.Record.Status))
	n, _, err := getUint(b, ck)
	if err != nil {
		return err
	}
	if err := setUint(b, ck, n+1); err != nil {
		return err
	}
	if o.CausationID != "" {
		if err := b.Set(withPrefix(pfxCommand, enc(nil, o.CausationID), id), nil, nil); err != nil {
			return err
		}
	}
	e, err := getJSON[Execution](b, withPrefix(pfxExec, id))
	if err != nil {
		return err
	}
	if e != nil && e.Journal {
		return nil // the journal is the source of truth of the state
	}
	r := o.Record
	if e == nil {
		e = &Execution{Entity: ent, Key: key, FirstAt: rec.Timestamp, Since: rec.Timestamp}
		if err := b.Set(withPrefix(pfxKey, enc(nil, key), enc(nil, ent)), nil, nil); err != nil {
			return err
		}
	}
	e.Action, e.Status, e.Released, e.Attempts, e.CommandID, e.Error = r.Action, r.Status, r.Release != nil, r.Attempts, o.CausationID, r.Error
	e.UpdatedAt, e.Partition, e.Offset = rec.Timestamp, -1, -1
	return p.putExec(b, id, e)
}

// Applied returns how many journal and outcome entries this Projection
// has applied since it was opened: after a restart, only those it had not
// indexed before.
func (p *Projection) Applied() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.applied
}

// Stats is the live view of the cluster the overview shows.
type Stats struct {
	At             time.Time
	CommandsPerSec float64
	Partitions     []PartitionStat
	// Err says why the last refresh failed, if it did.
	Err string
	// Undecodable counts journal and outcome entries skipped.
	Undecodable int
	// BadStatus counts status records skipped.
	BadStatus int
}

// PartitionStat is one partition's line on the overview.
type PartitionStat struct {
	Partition int32
	// Owner is the consumer group member that holds the partition of the
	// commands topic ("" if none: the partition waits for an executor).
	Owner string
	// LastWriter is the executor of the latest journal record seen.
	LastWriter string
	// Lag is how many journal and outcome entries the console has not
	// indexed yet (committed ones: an open transaction is not lag).
	Lag int64
	// Commands is the partition's end offset on the commands topic.
	Commands int64
	// Behind is how many commands of the partition the executors' group
	// has not committed yet (Commands minus the group's committed
	// offset): the executors' lag, what onceflight_consumer_lag says on
	// the owner. -1 when the group's offsets could not be read.
	Behind int64
	// State is what the latest status of the executor owning the
	// partition says (StateOK, StateHeld, ...), StateUnknown when no
	// current status names it; Reason says why it is held or halted, or
	// why unknown; StatusFrom is that executor and StatusAge the age of
	// its status.
	State, Reason, StatusFrom string
	StatusAge                 time.Duration
}

// Stats returns the latest live view.
func (p *Projection) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.mu.stats
	s.Partitions = slices.Clone(s.Partitions)
	s.Undecodable = p.mu.bad
	p.statusOf(&s)
	return s
}

func (p *Projection) statsLoop(ctx context.Context, adm *kadm.Client) {
	var prevTotal int64
	var prevAt time.Time
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		now := time.Now()
		s := Stats{At: now}
		var errs []string
		ends := map[string]map[int32]int64{}
		for _, topic := range []string{p.topics.Journal, p.topics.Outcomes} {
			lo, err := adm.ListCommittedOffsets(ctx, topic)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			ends[topic] = map[int32]int64{}
			lo.Each(func(o kadm.ListedOffset) {
				if o.Err == nil {
					ends[topic][o.Partition] = o.Offset
				}
			})
		}
		cmds := map[int32]int64{}
		var total int64
		if lo, err := adm.ListEndOffsets(ctx, p.topics.Commands); err == nil {
			lo.Each(func(o kadm.ListedOffset) {
				if o.Err == nil {
					cmds[o.Partition] = o.Offset
					total += o.Offset
				}
			})
			if !prevAt.IsZero() && total >= prevTotal {
				s.CommandsPerSec = float64(total-prevTotal) / now.Sub(prevAt).Seconds()
			}
			prevTotal, prevAt = total, now
		} else {
			errs = append(errs, err.Error())
		}
		owners := map[int32]string{}
		if dg, err := adm.DescribeGroups(ctx, p.group); err == nil {
			for _, g := range dg {
				for _, m := range g.Members {
					ca, ok := m.Assigned.AsConsumer()
					if !ok {
						continue
					}
					name := m.ClientHost
					if m.InstanceID != nil {
						name = *m.InstanceID
					}
					name = fmt.Sprintf("%s (member …%s)", name, tail(m.MemberID, 6))
					for _, t := range ca.Topics {
						if t.Topic == p.topics.Commands {
							for _, part := range t.Partitions {
								owners[part] = name
							}
						}
					}
				}
			}
		}
		// The group's committed offsets on the commands topic: a partition
		// without one has committed nothing, so all of it is behind.
		committed := map[int32]int64{}
		offsetsKnown := false
		if of, err := adm.FetchOffsets(ctx, p.group); err == nil {
			offsetsKnown = true
			of.Each(func(o kadm.OffsetResponse) {
				if o.Err == nil && o.Topic == p.topics.Commands {
					committed[o.Partition] = o.At
				}
			})
		} else {
			errs = append(errs, fmt.Sprintf("offsets of group %s: %v", p.group, err))
		}
		p.mu.Lock()
		for part, end := range ends[p.topics.Journal] {
			ps := PartitionStat{Partition: part, Owner: owners[part], LastWriter: p.mu.lastW[part], Commands: cmds[part], Behind: -1}
			if offsetsKnown {
				ps.Behind = max(0, cmds[part]-max(0, committed[part]))
			}
			ps.Lag = max(0, end-p.mu.pos[p.topics.Journal][part])
			ps.Lag += max(0, ends[p.topics.Outcomes][part]-p.mu.pos[p.topics.Outcomes][part])
			s.Partitions = append(s.Partitions, ps)
		}
		slices.SortFunc(s.Partitions, func(a, b PartitionStat) int { return cmp.Compare(a.Partition, b.Partition) })
		if len(errs) > 0 {
			s.Err = errs[0]
		}
		p.mu.stats = s
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// quietLogger keeps Pebble's informational chatter out of the console's
// log; errors still surface as the errors its calls return.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
