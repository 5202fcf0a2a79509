package consumer

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/mod/sumdb/note"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// errUnsigned holds a partition whose journal has records no trusted
// executor signature covers (docs/trust.md#signed-transactions): acting on
// them could run a key again on a forged release, or answer a command
// from a record no executor wrote.
var errUnsigned = errors.New("unsigned journal record")

// SignedJournal configures signed journal transactions.
type SignedJournal struct {
	// Signer signs a seal per journal partition of each transaction.
	Signer note.Signer
	// Trusted are the executors' public keys. With Require, restore and
	// takeover accept only records a trusted seal covers.
	Trusted *trust.TrustedKeys
	Require bool
	// OriginPrefix; default "onceflight/" + the journal topic.
	OriginPrefix string
}

// WithSignedJournal makes the executor seal each journal transaction and,
// with Require, verify the seals of what it restores.
func WithSignedJournal(c SignedJournal) Option {
	return func(e *Executor) {
		e.seals = &sealer{e: e, cfg: c}
		e.seals.mu.prev = map[int32]sealPrev{}
	}
}

// sealer writes the seals (committer goroutine) and makes the gates of
// restore.
type sealer struct {
	e   *Executor
	cfg SignedJournal
	// mu guards prev, read when the committer seals a transaction and
	// written after the commit. A leaf lock (DESIGN.md#lock-order).
	mu struct {
		sync.Mutex
		// prev is the last committed seal per partition, with its
		// epoch: a seal names its predecessor of the same epoch.
		prev map[int32]sealPrev
	}
}

type sealPrev struct {
	epoch int64
	hash  []byte
}

func (s *sealer) validate() error {
	if s.cfg.OriginPrefix == "" {
		s.cfg.OriginPrefix = "onceflight/" + s.e.cfg.Topics.Journal
	}
	if s.cfg.Signer == nil {
		return errors.New("consumer: signed journal: no signing key (an executor that must sign refuses to start without one)")
	}
	if s.cfg.Require && s.cfg.Trusted == nil {
		return errors.New("consumer: signed journal: verification required but no trusted keys")
	}
	return nil
}

// txSeals are the seals a transaction adds and the leaf hash of each of
// its entries (nil for other topics), reused by the checkpointer.
type txSeals struct {
	leaves [][]byte
	next   map[int32]sealPrev
	// notes are the seals' signed notes, by partition: each is the last
	// record the transaction writes to its journal partition.
	notes map[int32][]byte
}

// seal appends to tx one seal per journal partition it writes, after that
// partition's records. Called by flush before the transaction begins;
// what it records as the partitions' last seals counts only once the
// transaction commits (committed).
func (s *sealer) seal(ob *outbox.Batch) (*txSeals, error) {
	if s == nil {
		return nil, nil
	}
	entries := ob.Entries()
	ts := &txSeals{leaves: make([][]byte, len(entries)), next: map[int32]sealPrev{}, notes: map[int32][]byte{}}
	type part struct {
		epoch  int64
		hashes [][]byte
		head   string
	}
	parts := map[int32]*part{}
	var order []int32
	for i, en := range entries {
		if en.Kind != outbox.KindJournal {
			continue
		}
		r := en.Record
		h := trust.RecordLeafHash(r)
		ts.leaves[i] = h
		pt := parts[r.Partition]
		if pt == nil {
			pt = &part{}
			parts[r.Partition] = pt
			order = append(order, r.Partition)
		}
		pt.epoch = max(pt.epoch, headerEpoch(r))
		pt.hashes = append(pt.hashes, h)
		if en.Journal != nil {
			pt.head = en.Journal.Hash
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, p := range order {
		pt := parts[p]
		var prev []byte
		if last, ok := s.mu.prev[p]; ok && last.epoch == pt.epoch {
			prev = last.hash
		}
		msg, err := trust.Seal{Origin: trust.Origin(s.cfg.OriginPrefix, p), Epoch: pt.epoch, Prev: prev,
			Records: len(pt.hashes), Digest: trust.DigestLeaves(pt.hashes), Head: pt.head, Time: now}.Sign(s.cfg.Signer)
		if err != nil {
			return nil, err
		}
		ob.Seal(p, pt.epoch, msg)
		ts.next[p] = sealPrev{pt.epoch, trust.SealHash(msg)}
		ts.notes[p] = msg
	}
	// The seals are leaves too.
	all := ob.Entries()
	for i := len(entries); i < len(all); i++ {
		ts.leaves = append(ts.leaves, trust.RecordLeafHash(all[i].Record))
	}
	return ts, nil
}

// committed records the transaction's seals as the partitions' last.
func (s *sealer) committed(ts *txSeals) {
	if s == nil || ts == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, v := range ts.next {
		s.mu.prev[p] = v
	}
}

// gate is the seal check of one partition's restore, going on after the
// last seal trusted before the progress it starts from; nil when not
// required.
func (s *sealer) gate(p int32, prog dedupe.Progress) (*trustlog.SealGate, error) {
	if s == nil || !s.cfg.Require {
		return nil, nil
	}
	var note []byte
	if prog.SealNote != "" {
		note = []byte(prog.SealNote)
	}
	g, err := trustlog.NewSealGateAfter(trust.Origin(s.cfg.OriginPrefix, p), s.cfg.Trusted, note, prog.SealOffset)
	if err != nil {
		return nil, fmt.Errorf("restore partition %d: %w", p, err)
	}
	return g, nil
}

// noteOf is the seal tx wrote to journal partition p, if any.
func (ts *txSeals) noteOf(p int32) ([]byte, bool) {
	if ts == nil {
		return nil, false
	}
	n, ok := ts.notes[p]
	return n, ok
}

// gated feeds r to g and applies what trusted seals cover. It returns the
// offset after the last record applied (or -1) and errUnsigned for
// records no trusted seal covers.
func (e *Executor) gated(g *trustlog.SealGate, r *kgo.Record, apply func(*kgo.Record), release bool) (int64, error) {
	if r != nil {
		h := trust.RecordLeafHash(r)
		if wire.JournalKind(r) == schemas.KindSeal {
			if err := g.AddSeal(r.Offset, r.Value, h, r); err != nil {
				return -1, fmt.Errorf("%w: %v", errUnsigned, err)
			}
		} else {
			g.Add(r.Offset, h, r)
		}
	}
	if !release {
		return -1, nil
	}
	rs, err := g.Release()
	if err != nil {
		return -1, fmt.Errorf("%w: %v", errUnsigned, err)
	}
	next := int64(-1)
	for _, v := range rs {
		rec := v.(*kgo.Record)
		apply(rec)
		next = rec.Offset + 1
	}
	return next, nil
}
