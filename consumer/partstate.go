package consumer

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/onceflight/onceflight/internal/dedupe"
)

// partState is what the owner of a partition keeps in memory, grouped by
// who may change each field.
type partState struct {
	p int32

	// Set by restore before the partition is published; read-only after.
	epoch int64
	// member is the group member id the partition was assigned to
	// (onAssigned), read-only after. Its work commits only under that
	// membership (committer.dropUnowned): a member that was evicted and
	// rejoined gets a new id, and the cooperative protocol may hand it
	// back partitions it claimed from before without a callback, though
	// another member owned them in between.
	member string

	// chain is the partition's journal chain, guarded by committer.mu:
	// hashes and fencing tokens are assigned in the order records are
	// queued, which is the order the flush writes them.
	chain struct {
		hash string // hash of the last record queued
		// pos is a lower bound of the journal offset the next queued
		// record gets: the journal end after the last commit plus the
		// records queued since. Fencing tokens are taken from it.
		pos int64
		// token is the last fencing token handed out. Tokens are
		// max(token+1, pos): strictly increasing, and at most the offset
		// of the intent that carries them, so a new owner — whose
		// marker lies after every committed intent of the old one —
		// hands out larger tokens than the old owner ever did.
		token int64
	}

	// committed is what the last committed transaction left, written by
	// the committer only.
	committed struct {
		hash string // hash of the last committed record
		next int64  // next journal offset (progress)
		// sealNote, sealOff: the partition's last seal, once committed
		// (dedupe.Progress.SealNote).
		sealNote string
		sealOff  int64
	}

	// stored is the Progress the committer last wrote to Pebble for this
	// ownership, if it wrote one (committer loop only): a transaction
	// that leaves it as it is does not write it again (progressToStore).
	stored struct {
		prog dedupe.Progress
		ok   bool
	}

	// sent is the offset the committer last committed to the group for
	// this ownership, in a transaction that committed (committer loop
	// only): a transaction whose watermark is still that one does not
	// send it again (sentAlready).
	sent struct {
		off int64
		ok  bool
	}

	// held is what the committer's loop keeps of the partition's open
	// intents: intents in the journal whose key has no later record in
	// Pebble (committer loop only; DESIGN.md, "An intent stays out of
	// Pebble until its record is replaced").
	held struct {
		open  map[scopedKey]*intentHold // key → the hold of its latest intent
		holds []*intentHold             // in transaction order
	}

	lost     atomic.Bool
	draining atomic.Bool
	ctx      context.Context // cancelled when the partition is lost
	cancel   context.CancelFunc

	// wmu guards the offset tracking below. A leaf lock
	// (DESIGN.md#lock-order).
	wmu          sync.Mutex
	offs         []offEntry // tracked command offsets, in order
	maxSeen      int64
	committedOff int64 // -1 until known
	// start is the group's committed offset at restore (read-only): where
	// consumption resumes, for the lag until a record is tracked.
	start int64

	// Guarded by pipeline.mu.
	buf struct {
		n, bytes int  // commands dispatched, not yet staged or dropped
		skipped  int  // commands read past, remembered by offset (skip.go)
		paused   bool // fetching paused by the pipeline
		inflight int  // commands of this partition a worker took off their queue and has not staged or dropped (drainPartition waits for 0)
		// parkWatched: an entity of the partition was parked, and the
		// partition's end brings parked entities back (park.go).
		parkWatched bool
	}
}

type offEntry struct {
	off    int64
	staged bool
}

func newPartState(p int32, prog dedupe.Progress) *partState {
	ctx, cancel := context.WithCancel(context.Background())
	st := &partState{p: p, epoch: prog.Epoch, ctx: ctx, cancel: cancel, maxSeen: -1, committedOff: -1}
	st.chain.hash = prog.LastHash
	st.chain.pos = prog.JournalOffset
	st.chain.token = prog.TokenSeq
	st.committed.hash = prog.LastHash
	st.committed.next = prog.JournalOffset
	st.committed.sealNote, st.committed.sealOff = prog.SealNote, prog.SealOffset
	return st
}

// track registers a consumed offset; false if it was seen already.
func (st *partState) track(off int64) bool {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if off <= st.maxSeen {
		return false
	}
	if st.committedOff < 0 {
		// The first record fetched after assignment starts at the
		// committed offset.
		st.committedOff = off
	}
	st.maxSeen = off
	st.offs = append(st.offs, offEntry{off: off})
	return true
}

// startOffset is the offset below which the partition is answered, as
// far as known: the tracked committed offset, or the one at restore.
func (st *partState) startOffset() int64 {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.committedOff >= 0 {
		return st.committedOff
	}
	return st.start
}

func (st *partState) markStaged(off int64) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	i := sort.Search(len(st.offs), func(i int) bool { return st.offs[i].off >= off })
	if i < len(st.offs) && st.offs[i].off == off {
		st.offs[i].staged = true
	}
}

// watermark is the offset to commit: below it every tracked command is
// answered in this or an earlier transaction.
func (st *partState) watermark() (int64, bool) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.committedOff < 0 {
		return 0, false
	}
	wm := st.committedOff
	for _, o := range st.offs {
		if !o.staged {
			return wm, true
		}
		wm = o.off + 1
	}
	return wm, true
}

// committedTo drops tracked offsets below wm.
func (st *partState) committedTo(wm int64) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	i := 0
	for i < len(st.offs) && st.offs[i].off < wm {
		i++
	}
	st.offs = append(st.offs[:0], st.offs[i:]...)
	if wm > st.committedOff {
		st.committedOff = wm
	}
}

// progress is what Pebble stores for the partition after a commit
// (committer only).
func (st *partState) progress(tokens int64) dedupe.Progress {
	return dedupe.Progress{JournalOffset: st.committed.next, Epoch: st.epoch, LastHash: st.committed.hash, TokenSeq: tokens,
		SealNote: st.committed.sealNote, SealOffset: st.committed.sealOff}
}

// intentHold is the Progress stored before a transaction that journaled
// intents, and how many of those intents are still open: while any is,
// the partition's stored Progress may not pass it, so that a restore
// replays them (committer loop only).
type intentHold struct {
	prog dedupe.Progress
	n    int
}

// openIntent notes that k's latest intent is in the transaction of h:
// only that intent needs replaying, so an earlier hold of k is let go.
func (st *partState) openIntent(k scopedKey, h *intentHold) {
	if st.held.open == nil {
		st.held.open = map[scopedKey]*intentHold{}
	}
	if old, ok := st.held.open[k]; ok {
		old.n--
	}
	st.held.open[k] = h
	h.n++
}

// closeIntent notes that a record replacing k's intent is in the Pebble
// batch being written.
func (st *partState) closeIntent(k scopedKey) {
	if h, ok := st.held.open[k]; ok {
		h.n--
		delete(st.held.open, k)
	}
}

// sentAlready reports whether wm is the offset this ownership last
// committed to the group (committer loop only). Committing it again
// changes nothing, and cost a command's transaction an offset per idle
// partition: eleven of twelve in the TxnOffsetCommit, and as many offset
// records the broker writes when the transaction commits (BENCHMARKS.md,
// "Round 16 (latency)").
func (st *partState) sentAlready(wm int64) bool {
	return st.sent.ok && st.sent.off == wm
}

// offsetSent notes that off was committed to the group for st, by a
// transaction that committed (committer loop only).
func (st *partState) offsetSent(off int64) {
	st.sent.off, st.sent.ok = off, true
}

// storedProgress is the Progress to store with the batch being written:
// the one before the oldest transaction with an open intent, or the
// current one (progress) when none is open. Its token floor is always the
// current one: restore takes the highest it reads, and a lower floor would
// only let a token be handed out twice.
func (st *partState) storedProgress(tokens int64) dedupe.Progress {
	i := 0
	for i < len(st.held.holds) && st.held.holds[i].n <= 0 {
		i++
	}
	st.held.holds = st.held.holds[i:]
	if len(st.held.holds) == 0 {
		st.held.holds = nil
		return st.progress(tokens)
	}
	prog := st.held.holds[0].prog
	prog.TokenSeq = max(prog.TokenSeq, tokens)
	return prog
}

// progressToStore is storedProgress(tokens), and whether it differs from
// the Progress the committer last wrote for st (committer loop only).
// Only a partition a transaction moved needs writing: rewriting every
// owned partition's in every transaction was, with one command per
// transaction, eleven of twelve Progress entries (JSON, Pebble entries,
// WAL bytes) for nothing, and a repeat's transaction wrote nothing else
// (BENCHMARKS.md, "Round 14 (latency)").
func (st *partState) progressToStore(tokens int64) (dedupe.Progress, bool) {
	prog := st.storedProgress(tokens)
	return prog, !st.stored.ok || prog != st.stored.prog
}

// progressStored notes that prog was written for st (committer loop only).
func (st *partState) progressStored(prog dedupe.Progress) {
	st.stored.prog, st.stored.ok = prog, true
}
