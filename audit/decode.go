package audit

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// decoded is what the checks need of one record that does not depend on
// any other record: its decoding, its hash, the digests it is matched by.
// It is computed apart from the checks (decode), so that Run can decode
// the records of a fetch on every core and then check them in order on
// one (records).
type decoded struct {
	err error

	// journal records
	kind            string // schemas.HeaderKind
	rec             schemas.Record
	hash            string
	hashErr         error
	keyID, entityID digest // of (partition, entity, key) and (partition, entity); an outcome's keyID too
	recHash         digest // hashDigest of the record's hash
	// unreleased, for a record with a release, is hashDigest of what it
	// hashes to without it (outcomes_match): a command before the
	// release, consumed again, is answered with the record so.
	unreleased    digest
	hasUnreleased bool
	// misplaced: the record's entity belongs on another partition
	// (Input.CommandPartitions), so it was written outside the entity's
	// single flight.
	misplaced bool
	tagged    bool // tag is the recordMemo's tag of its bytes (decoded with a memo)

	tag memoTag // of a journal record's bytes, or of the record an outcome carries

	// outcome events
	o                 outcomeFacts
	fromMemo          bool // o's record was found in the recordMemo, not decoded
	x                 outcomeMatch
	id, tuple, answer digest // of its id, (causation, status, key, decision), (causation, entity, key)
	causation         digest // of its causation id; for a command, of its id
	cmd               schemas.Command
}

// decode fills d for r. It reads only the auditor's configuration, never
// its state, so records can be decoded concurrently.
func (a *auditor) decode(r *kgo.Record, d *decoded) {
	// d is a slot reused chunk after chunk (auditor.dbuf): tagged must say
	// this record's tag, not a record's decoded here before.
	d.tagged = false
	switch r.Topic {
	case a.in.Topics.Journal:
		d.kind, _ = header(r, schemas.HeaderKind)
		if d.kind != schemas.KindRecord || !a.isChecked(r.Partition) {
			return
		}
		if d.rec, d.err = schemas.UnmarshalRecord(r.Value); d.err == nil {
			d.hash, d.hashErr = recordHash(&d.rec, r.Value)
			// A key is scoped to its entity, and both to the partition.
			p := strconv.FormatInt(int64(r.Partition), 10)
			d.keyID = digestOf(p, d.rec.Entity, d.rec.IdempotencyKey)
			d.entityID = digestOf(p, d.rec.Entity)
			d.recHash = hashDigest(d.rec.Hash)
			d.hasUnreleased = false
			if d.rec.Release != nil {
				cp := d.rec
				cp.Release = nil
				if _, err := wire.SealRecord(&cp); err == nil {
					d.unreleased, d.hasUnreleased = hashDigest(cp.Hash), true
				}
			}
			n := a.in.CommandPartitions
			d.misplaced = n > 0 && partitioner.ForEntity(d.rec.Entity, n) != r.Partition
			if a.memo != nil {
				a.memo.tagOf(r.Value, &d.tag)
				d.tagged = true
			}
		}
	case a.in.Topics.Outcomes:
		// outcomes_match reads d.x only for a partition the audit
		// checks; elsewhere filling it would decode the record whole
		// and hash it again for nothing.
		checked := a.isChecked(r.Partition)
		var x *outcomeMatch
		if d.x = (outcomeMatch{}); checked {
			x = &d.x
		}
		if d.o, d.fromMemo, d.err = decodeOutcome(r, a.memo, &d.tag, x); d.err != nil {
			return
		}
		o := &d.o
		d.causation = digestOf(o.causation)
		if checked {
			// The key of the journal partition the outcome's record
			// is on (outcomes_match), as the journal record's keyID:
			// the memo's, for the bytes of a record of this partition.
			if d.x.keyPart == r.Partition {
				d.keyID = d.x.keyID
			} else {
				d.keyID = digestOf(strconv.FormatInt(int64(r.Partition), 10), o.entity, o.key)
			}
		}
		if !a.isChecked(o.partition) {
			return
		}
		d.id = digestOf(o.id)
		d.tuple = digestOf(o.causation, string(o.status), o.key, o.decision)
		d.answer = digestOf(o.causation, o.entity, o.key)
	case a.in.Topics.Commands:
		if !a.isChecked(r.Partition) {
			return
		}
		// The checks read a command's attributes, and the data and
		// fingerprint of an operator decision only (its signature covers
		// them): every other command is decoded without copying its data
		// or hashing its fingerprint, which accepts and refuses exactly
		// the records DecodeCommand does.
		d.cmd, d.err = schemas.DecodeCommandChecked(r, a.in.MaxDataBytes)
		if d.err == nil && schemas.IsDecision(d.cmd.Type) {
			d.cmd, d.err = schemas.DecodeCommand(r, a.in.MaxDataBytes)
		}
		if d.err == nil {
			d.causation = digestOf(d.cmd.ID)
		}
	}
}

// decodeChunk bounds the records decoded ahead of their checks: a
// decoded record holds up to a few KB (its record, outcome or command
// decoded), and a fetch may bring tens of thousands. A variable so that a
// test can make fetches span several chunks.
var decodeChunk = 1024

// records checks rs, records of any of the journal, outcomes and commands
// topics in the order each partition was read (feed, then flush): when it
// returns, every record of rs has been checked.
func (a *auditor) records(rs []*kgo.Record) {
	a.feed(rs)
	a.flush()
}

// feed checks rs as records does, decodeChunk at a time: each chunk is
// decoded on every core while the one before it is checked, one record
// after the other, on this goroutine. The last chunk is left decoded but
// not checked (a.held): the next feed checks it while it decodes its own
// first chunk, so that a fetch's records are decoded while the fetch
// before it is still being checked, not only while its own chunks are
// (about one and a quarter chunks a fetch: the checks of each fetch's last
// chunk would otherwise run with no decoding beside them). The end of a
// step that stream leaves with afterHeld runs there too, after the held
// chunk is checked. flush checks it and runs that end; the checks see the
// records, and the ends, in the same order either way.
//
// What is held between calls is one chunk of decoded records and the
// records they point at: one fetch's buffers at most, besides those of
// the fetch being fed.
func (a *auditor) feed(rs []*kgo.Record) {
	for len(rs) > 0 {
		c := rs[:min(len(rs), decodeChunk)]
		rs = rs[len(c):]
		// a.dbuf[a.heldBuf] is the held chunk's, if any: c goes in the other.
		buf := 1 - a.heldBuf
		if cap(a.dbuf[buf]) < len(c) {
			a.dbuf[buf] = make([]decoded, decodeChunk)
		}
		ds := a.dbuf[buf][:len(c)]
		if len(a.held) == 0 && a.ended == nil {
			a.decodeAll(c, ds)
		} else {
			// c is decoded while the held chunk is checked.
			var next sync.WaitGroup
			next.Go(func() { a.decodeAll(c, ds) })
			a.flush()
			next.Wait()
		}
		a.held, a.heldBuf = c, buf
	}
}

// afterHeld has flush run end once the held chunk is checked (after the
// ends given before it): stream ends a step there, so that the end of a
// step too runs while the next one's first chunk is decoded.
func (a *auditor) afterHeld(end func()) {
	if before := a.ended; before != nil {
		a.ended = func() { before(); end() }
		return
	}
	a.ended = end
}

// flush checks the chunk feed left decoded (if any), then runs what
// afterHeld was given.
func (a *auditor) flush() {
	a.checkHeld()
	if end := a.ended; end != nil {
		a.ended = nil
		end()
	}
}

// checkHeld checks the chunk feed left decoded (if any).
func (a *auditor) checkHeld() {
	c := a.held
	if len(c) == 0 {
		return
	}
	ds := a.dbuf[a.heldBuf][:len(c)]
	for j, r := range c {
		if testHookCheck != nil {
			testHookCheck(r)
		}
		switch r.Topic {
		case a.in.Topics.Journal:
			a.checkJournal(r, &ds[j])
		case a.in.Topics.Outcomes:
			a.checkOutcome(r, &ds[j])
			if ds[j].fromMemo {
				a.memoHits++
			}
		case a.in.Topics.Commands:
			a.checkCommand(r, &ds[j])
		}
	}
	// Drop what the decoded records point at.
	clear(ds)
	a.held = nil
}

// testHookDecode and testHookCheck, when a test sets them, are called as
// a chunk starts being decoded and before each record is checked.
var (
	testHookDecode func(chunk []*kgo.Record)
	testHookCheck  func(r *kgo.Record)
)

// decodeAll decodes rs into ds on every core: first the journal records
// and commands, then, once the journal records are in the auditor's
// recordMemo (if it has one), the outcomes, most of whose records are
// found there rather than decoded again.
func (a *auditor) decodeAll(rs []*kgo.Record, ds []decoded) {
	if testHookDecode != nil {
		testHookDecode(rs)
	}
	if a.memo == nil {
		a.decodeEach(rs, ds, nil)
		return
	}
	outcomes := a.in.Topics.Outcomes
	a.decodeEach(rs, ds, func(r *kgo.Record) bool { return r.Topic != outcomes })
	for i, r := range rs {
		// An outcome's slot is not decoded yet in this chunk: its tagged
		// is still a journal record's of an earlier chunk.
		if d := &ds[i]; r.Topic != outcomes && d.tagged {
			a.memo.addKeyed(&d.tag, &d.rec, d.keyID, r.Partition)
		}
	}
	a.decodeEach(rs, ds, func(r *kgo.Record) bool { return r.Topic == outcomes })
}

// decodeEach decodes the records of rs that want takes (all if want is
// nil) into ds on every core. The workers claim decodeBatch records at a
// time from a shared counter, so that a worker that gets its core late
// (the checks of the chunk before hold it: feed) leaves the records it
// has not claimed to the others instead of owning a fixed share of them,
// and a pass whose records sit in one part of rs is shared out too.
func (a *auditor) decodeEach(rs []*kgo.Record, ds []decoded, want func(*kgo.Record) bool) {
	one := func(i int) {
		if want == nil || want(rs[i]) {
			a.decode(rs[i], &ds[i])
		}
	}
	workers := min(runtime.GOMAXPROCS(0), (len(rs)+63)/64)
	if workers <= 1 {
		for i := range rs {
			one(i)
		}
		return
	}
	var next atomic.Int64
	work := func() {
		for {
			hi := int(next.Add(decodeBatch))
			lo := hi - decodeBatch
			if lo >= len(rs) {
				return
			}
			for i := lo; i < min(hi, len(rs)); i++ {
				one(i)
			}
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// decodeBatch is how many records a decoding worker claims at a time: a
// few microseconds of work, against one shared counter increment.
const decodeBatch = 8
