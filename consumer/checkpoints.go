package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/mod/sumdb/note"

	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// DefaultCheckpointsTopic is where executors publish signed checkpoints.
const DefaultCheckpointsTopic = "onceflight.checkpoints"

// CheckpointConfig configures signed checkpoints (docs/trust.md): per owned
// journal partition, the root of an RFC 6962 tree over its records, signed
// with Signer and published to Topic every Every records or Interval,
// whichever comes first, and at clean shutdown.
type CheckpointConfig struct {
	// Signer is the executor's Ed25519 note signer: serve loads it from the
	// key file `onceflight keygen` writes; an embedder makes one with
	// golang.org/x/mod/sumdb/note.NewSigner from that file's contents.
	Signer note.Signer
	// Trusted verifies the last checkpoint a new owner resumes from; nil:
	// only checkpoints by Signer's own key are resumed from, others make
	// the new owner rebuild the tree from the journal's first record.
	Trusted *trust.TrustedKeys
	// Topic; default DefaultCheckpointsTopic.
	Topic string
	// OriginPrefix; default "onceflight/" + the journal topic. The origin
	// of partition p is OriginPrefix + "/" + p.
	OriginPrefix string
	// Every is the number of new records that triggers a checkpoint;
	// default 10 000.
	Every uint64
	// Interval is the longest time new records wait for a checkpoint;
	// default 10s.
	Interval time.Duration
}

// WithCheckpoints makes the executor publish signed checkpoints.
func WithCheckpoints(c CheckpointConfig) Option {
	return func(e *Executor) { e.cp = &checkpointer{e: e, cfg: c} }
}

// checkpointer keeps one compact Merkle tree per journal partition this
// executor writes to and publishes signed tree heads. It sees every
// committed journal record through committed, called by the committer
// after each transaction commits, so it signs only what this executor
// wrote and what the partition held before it (read back from the
// journal when it takes the partition over).
type checkpointer struct {
	e      *Executor
	cfg    CheckpointConfig
	kick   chan struct{}
	ctx    context.Context // ends at stop: the loop's and the rebuilds'
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// rebuilds are the trees being rebuilt after a new ownership: a clean
	// stop lets them finish (bounded) before it publishes, or the
	// partitions they belong to would be left without a final checkpoint.
	rebuilds sync.WaitGroup
	rctx     context.Context // the rebuilds' context: ends when stop says
	rcancel  context.CancelFunc

	// mu guards the trees and the published notes; the committer (after
	// each commit), the rebuilds, the loop and GET /checkpoints take it.
	// A leaf lock (DESIGN.md#lock-order).
	mu struct {
		sync.Mutex
		parts  map[int32]*cpPart // a cpPart's fields too
		latest map[int32][]byte  // last published note per partition
	}
}

// cpPart is one partition's tree, guarded by checkpointer.mu. A new epoch (a new ownership) starts a
// new cpPart, rebuilt from the last checkpoint and the journal; records
// committed meanwhile wait in pending.
type cpPart struct {
	epoch     int64
	tree      *trustlog.Tree // nil while rebuilding or broken
	next      int64          // journal offset after the tree's last leaf
	pending   []cpLeaf
	published uint64
	broken    error // why no checkpoints are published for it
	// readBack: the restore of this ownership read its epoch marker back
	// from the journal (markerReadBack). Until then nothing of the tree
	// is published: a marker transaction the client was told committed
	// may be aborted in the journal (TestCheckpointsAfterMarkerAbortedUnseen),
	// and a checkpoint over leaves the journal never held would not only
	// fail every proof of the partition, it would be the tree the next
	// ownership resumes from.
	readBack bool
}

type cpLeaf struct {
	off  int64
	hash []byte
}

func (c *checkpointer) origin(p int32) string { return trust.Origin(c.cfg.OriginPrefix, p) }

// start creates the topic and starts the publishing loop.
func (c *checkpointer) start(ctx context.Context) error {
	if c.cfg.Signer == nil {
		return errors.New("consumer: checkpoints: no signing key")
	}
	if c.cfg.Topic == "" {
		c.cfg.Topic = DefaultCheckpointsTopic
	}
	if c.cfg.OriginPrefix == "" {
		c.cfg.OriginPrefix = "onceflight/" + c.e.cfg.Topics.Journal
	}
	if c.cfg.Every == 0 {
		c.cfg.Every = 10_000
	}
	if c.cfg.Interval <= 0 {
		c.cfg.Interval = 10 * time.Second
	}
	if c.cfg.Trusted == nil {
		// Resume from our own checkpoints at least.
		vkey, err := signerVKey(c.cfg.Signer)
		if err != nil {
			return err
		}
		if c.cfg.Trusted, err = trust.ParseTrustedKeys("(own key)", []byte(vkey)); err != nil {
			return err
		}
	}
	c.mu.parts, c.mu.latest, c.kick = map[int32]*cpPart{}, map[int32][]byte{}, make(chan struct{}, 1)
	adm := kadm.NewClient(c.e.plain)
	// Compacted by origin: the last checkpoint of each partition stays for
	// the next owner; auditors keep the ones they want to hold us to.
	resp, err := adm.CreateTopic(ctx, int32(c.e.nPart), -1, map[string]*string{"cleanup.policy": new("compact")}, c.cfg.Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("consumer: create topic %s: %w", c.cfg.Topic, err)
	}
	td, err := adm.ListTopics(ctx, c.cfg.Topic)
	if err != nil {
		return fmt.Errorf("consumer: describe topic %s: %w", c.cfg.Topic, err)
	}
	if n := len(td[c.cfg.Topic].Partitions); n < c.e.nPart {
		return fmt.Errorf("consumer: topic %s has %d partitions, want at least %d (one per journal partition)", c.cfg.Topic, n, c.e.nPart)
	}
	lctx, cancel := context.WithCancel(ctx)
	c.ctx, c.cancel = lctx, cancel
	// Rebuilds outlive Run's context (cancelled first at a clean stop):
	// stop lets them finish, bounded, and then cancels them itself.
	c.rctx, c.rcancel = context.WithCancel(context.WithoutCancel(ctx))
	c.wg.Go(func() {
		t := time.NewTicker(c.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			case <-c.kick:
			}
			c.publish(lctx)
		}
	})
	return nil
}

// stop ends the loop and publishes what is not yet published: a clean
// shutdown leaves a checkpoint of everything this executor wrote.
func (c *checkpointer) stop() {
	if c == nil || c.cancel == nil {
		return
	}
	done := make(chan struct{})
	go func() { c.rebuilds.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	c.rcancel()
	c.cancel()
	c.wg.Wait()
	c.rebuilds.Wait() // cancelled now, if still running
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.publish(ctx)
}

// committed adds the journal records of a committed transaction (its
// outbox entries, in publication order, offsets set) to their trees. It
// is the committer's only call into the checkpointer.
func (c *checkpointer) committed(entries []outbox.Entry, ts *txSeals) {
	if c == nil || c.mu.parts == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	due := false
	for i, en := range entries {
		if en.Kind != outbox.KindJournal {
			continue
		}
		r := en.Record
		epoch := headerEpoch(r)
		st := c.mu.parts[r.Partition]
		if st == nil || epoch > st.epoch {
			// A new ownership: the journal may hold records of other
			// owners since our tree, so it is rebuilt up to this one.
			st = &cpPart{epoch: epoch}
			c.mu.parts[r.Partition] = st
			p, target := r.Partition, r.Offset
			c.rebuilds.Go(func() { c.rebuild(p, st, target) })
		}
		var h []byte
		if ts != nil && i < len(ts.leaves) {
			h = ts.leaves[i] // hashed once, by the sealer
		}
		if h == nil {
			h = trust.RecordLeafHash(r)
		}
		if st.tree == nil {
			if st.broken == nil {
				st.pending = append(st.pending, cpLeaf{r.Offset, h})
			}
			continue
		}
		st.tree.Append(h)
		st.next = r.Offset + 1
		due = due || st.tree.Size()-st.published >= c.cfg.Every
	}
	if due {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// markerReadBack says that the restore of partition p's ownership epoch
// read its epoch marker back from the journal: the tree of that ownership
// holds what the journal holds and may be published.
func (c *checkpointer) markerReadBack(p int32, epoch int64) {
	if c == nil || c.mu.parts == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.mu.parts[p]; st != nil && st.epoch == epoch {
		st.readBack = true
	}
}

func headerEpoch(r *kgo.Record) int64 {
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderEpoch {
			n, _ := strconv.ParseInt(string(h.Value), 10, 64)
			return n
		}
	}
	return 0
}

// rebuild makes st's tree: from the partition's last trusted checkpoint
// (or the journal's first record) through the record before target, the
// first record this ownership wrote. Every record below target was written
// by an earlier owner whose transactions are over (fenced by our epoch
// marker), so the journal below target no longer changes.
func (c *checkpointer) rebuild(p int32, st *cpPart, target int64) {
	ctx, cancel := context.WithTimeout(c.rctx, c.e.cfg.TransactionTimeout+time.Minute)
	defer cancel()
	tree, err := c.treeAt(ctx, p, target)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		st.broken, st.pending = err, nil
		c.e.log.Error("checkpoints: partition publishes none until its next ownership", "partition", p, "err", err)
		return
	}
	for _, l := range st.pending {
		tree.Append(l.hash)
		st.next = l.off + 1
	}
	st.tree, st.pending = tree, nil
	st.published = min(st.published, tree.Size())
}

func (c *checkpointer) treeAt(ctx context.Context, p int32, target int64) (*trustlog.Tree, error) {
	tree, from := trustlog.NewTree(), int64(0)
	if t, next, err := c.lastCheckpoint(ctx, p); err != nil {
		c.e.log.Warn("checkpoints: last checkpoint not usable; rebuilding the tree from the journal's start", "partition", p, "err", err)
	} else if t != nil && next <= target {
		tree, from = t, next
	}
	if from >= target {
		return tree, nil
	}
	adm := kadm.NewClient(c.e.plain)
	starts, err := adm.ListStartOffsets(ctx, c.e.cfg.Topics.Journal)
	if err != nil {
		return nil, fmt.Errorf("journal start offsets: %w", err)
	}
	if s, ok := starts.Lookup(c.e.cfg.Topics.Journal, p); !ok || s.Err != nil {
		return nil, fmt.Errorf("journal start offset of partition %d unknown", p)
	} else if s.Offset > from {
		return nil, fmt.Errorf("the journal starts at offset %d but the tree needs its records from %d (deleted by retention, and no checkpoint past them)", s.Offset, from)
	}
	rd, err := c.e.journalReader(p, from)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	for at := from; at < target; {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read journal partition %d to offset %d (at %d): %w", p, target, at, err)
		}
		for _, r := range fs.Records() {
			if r.Offset >= target {
				at = target
				break
			}
			at = r.Offset + 1
			if !r.Attrs.IsControl() {
				tree.Append(trust.RecordLeafHash(r))
			}
		}
	}
	return tree, nil
}

// lastCheckpoint reads partition p's last checkpoint and returns its tree
// (checked against the signed root) and the journal offset it ends at;
// nil when there is none.
func (c *checkpointer) lastCheckpoint(ctx context.Context, p int32) (*trustlog.Tree, int64, error) {
	adm := kadm.NewClient(c.e.plain)
	ends, err := adm.ListEndOffsets(ctx, c.cfg.Topic)
	if err != nil {
		return nil, 0, fmt.Errorf("end offsets of %s: %w", c.cfg.Topic, err)
	}
	end, ok := ends.Lookup(c.cfg.Topic, p)
	if !ok || end.Err != nil || end.Offset == 0 {
		return nil, 0, nil
	}
	rd, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.e.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.cfg.Topic: {p: kgo.NewOffset().At(end.Offset - 1)}}),
	}, c.e.opts...)...)
	if err != nil {
		return nil, 0, err
	}
	defer rd.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		fs := rd.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("read %s partition %d: %w", c.cfg.Topic, p, err)
		}
		rs := fs.Records()
		if len(rs) == 0 {
			continue
		}
		return c.resume(p, rs[len(rs)-1])
	}
}

// resume checks a checkpoint record and makes its tree.
func (c *checkpointer) resume(p int32, r *kgo.Record) (*trustlog.Tree, int64, error) {
	want := c.origin(p)
	cp, err := trust.OpenCheckpoint(r.Value, c.cfg.Trusted, func(o string) bool { return o == want })
	if err != nil {
		return nil, 0, err
	}
	return trustlog.ResumeFrom(cp, r.Headers)
}

// publish signs and publishes the trees that grew since their last
// checkpoint.
func (c *checkpointer) publish(ctx context.Context) {
	type snap struct {
		p    int32
		size uint64
		root []byte
		tree *trustlog.Tree
		next int64
	}
	var snaps []snap
	c.mu.Lock()
	for p, st := range c.mu.parts {
		if st.readBack && st.tree != nil && st.tree.Size() > st.published {
			snaps = append(snaps, snap{p, st.tree.Size(), st.tree.Root(), st.tree.Clone(), st.next})
		}
	}
	c.mu.Unlock()
	for _, s := range snaps {
		cp := &trust.Checkpoint{Origin: c.origin(s.p), Size: s.size, Root: s.root, Time: time.Now()}
		msg, err := cp.Sign(c.cfg.Signer)
		if err != nil {
			c.e.log.Error("checkpoints: sign", "partition", s.p, "err", err)
			continue
		}
		r := &kgo.Record{Topic: c.cfg.Topic, Partition: s.p, Key: []byte(cp.Origin), Value: msg, Headers: trustlog.CheckpointHeaders(s.tree, s.next)}
		if err := c.e.plain.ProduceSync(ctx, r).FirstErr(); err != nil {
			c.e.log.Warn("checkpoints: publish", "partition", s.p, "err", err)
			continue
		}
		c.mu.Lock()
		if st := c.mu.parts[s.p]; st != nil {
			st.published = max(st.published, s.size)
		}
		c.mu.latest[s.p] = msg
		c.mu.Unlock()
	}
}

// Checkpoints returns the last checkpoint this executor published for each
// journal partition, as signed notes (served at GET /checkpoints).
func (e *Executor) Checkpoints() map[int32][]byte {
	out := map[int32][]byte{}
	if e.cp == nil {
		return out
	}
	e.cp.mu.Lock()
	defer e.cp.mu.Unlock()
	for p, n := range e.cp.mu.latest {
		out[p] = n
	}
	return out
}

// signerVKey is the verifier key of s, which a note.Signer does not tell:
// trustlog.Signer (trustlog.LoadSigner) does.
func signerVKey(s note.Signer) (string, error) {
	if k, ok := s.(interface{ VerifierKey() string }); ok {
		return k.VerifierKey(), nil
	}
	return "", errors.New("consumer: checkpoints: the signer does not tell its public key; give CheckpointConfig.Trusted")
}
