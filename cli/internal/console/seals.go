package console

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// With trusted keys (WithTrustedKeys), the projection reads each journal
// partition through a trustlog.SealGate, as restore does
// (docs/trust.md#signed-transactions): a journal record is applied to the
// index only once a seal signed by a trusted executor key covers it. A
// record no trusted seal covers is never any execution's state: it is kept
// aside, under the u prefix of the index, so the execution page can show
// it marked UNSIGNED and decisions on its key are refused.
//
// The console keeps the records since a partition's last seal itself and
// hands a transaction to the gate only when its seal arrives, with the
// records the seal claims: records before them are refused at once (a
// forged record appended between two real transactions), and the gate
// goes on with its chain of seals, so a copy of an old transaction
// appended after a forged record is still refused. The stored position of
// a partition is the first record not judged yet, so a restart reads those
// again; records judged stay judged. With it the index keeps the last seal
// the gate trusted before that position, and a restart's gate goes on
// after it (trustlog.NewSealGateAfter): a fresh gate would take the first
// seal it reads as a chain's start, so a copy of an old transaction
// appended while the console was stopped would pass.

// WithTrustedKeys makes the projection apply only journal records covered
// by a seal of a key in tk (docs/trust.md). originPrefix names the
// journal in the seals ("" for the default "onceflight/" + the journal
// topic).
func WithTrustedKeys(tk *trust.TrustedKeys, originPrefix string) ProjectionOption {
	return func(p *Projection) { p.trusted, p.originPrefix = tk, originPrefix }
}

// UnsignedRecord is a journal record that no trusted executor seal covers:
// shown, never believed.
type UnsignedRecord struct {
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Time      time.Time       `json:"time"`
	Record    *schemas.Record `json:"record,omitempty"`
	// Why no trusted seal covers it (trustlog.UnsignedError's reason).
	Why string `json:"why"`
	// Pending: no seal has followed it yet. A transaction whose seal is
	// in the next fetch shows so for a moment; anything else stays.
	Pending bool `json:"pending,omitempty"`
}

// refusal is a record the gate refused, with why.
type refusal struct {
	rec *kgo.Record
	why string
}

// partSeals is the seal checking of one journal partition.
type partSeals struct {
	origin  string
	tk      *trust.TrustedKeys
	gate    *trustlog.SealGate
	seedOff int64 // the offset of the last trusted seal the index holds; -1: none
	from    int64 // the offset reading started at
	started bool
	buf     []*kgo.Record // since the last seal, not handed to the gate yet
	inGate  []*kgo.Record // handed to the gate, not released or refused yet
	marked  map[int64][]byte
	out     []*kgo.Record
	refused []refusal
}

func newPartSeals(origin string, tk *trust.TrustedKeys, from int64) *partSeals {
	return &partSeals{origin: origin, tk: tk, gate: trustlog.NewSealGate(origin, tk), seedOff: -1, from: from, marked: map[int64][]byte{}}
}

// openPartSeals is the seal checking of journal partition part, whose
// stored position is from: its gate goes on after the last seal trusted
// before from, which the index keeps (applySealed).
func (p *Projection) openPartSeals(part int32, from int64) (*partSeals, error) {
	ps := newPartSeals(trust.Origin(p.originPrefix, part), p.trusted, from)
	v, closer, err := p.db.Get(trustedSealKey(ps.origin))
	if errors.Is(err, pebble.ErrNotFound) {
		return ps, nil
	}
	if err != nil {
		return nil, fmt.Errorf("console index: read the last trusted seal of %s: %w", ps.origin, err)
	}
	defer closer.Close()
	if len(v) < 8 {
		return nil, fmt.Errorf("console index: the last trusted seal of %s is malformed", ps.origin)
	}
	off := int64(binary.BigEndian.Uint64(v))
	g, err := trustlog.NewSealGateAfter(ps.origin, ps.tk, slices.Clone(v[8:]), off)
	if err != nil {
		return nil, fmt.Errorf("console index: %w", err)
	}
	ps.gate, ps.seedOff = g, off
	return ps, nil
}

// trustedSealKey holds the last seal the gate of the journal partition
// named origin trusted: its offset (8 bytes) and its note. Keyed by
// origin, so that a console started with another origin prefix starts
// afresh rather than chaining to a seal of another journal.
func trustedSealKey(origin string) []byte {
	return append([]byte{pfxTrustedSeal}, origin...)
}

// dropTrustedSeals forgets the last trusted seals, at the start of a
// projection without trusted keys: it moves the journal positions without
// a gate, so a seal stored before would be older than the position, and a
// later start with trusted keys would refuse the chain that goes on from
// where it stopped reading, as not following that seal.
func (p *Projection) dropTrustedSeals() error {
	b := p.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange([]byte{pfxTrustedSeal}, []byte{pfxTrustedSeal + 1}, nil); err != nil {
		return fmt.Errorf("console index: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("console index: %w", err)
	}
	return nil
}

// storeTrustedSeal writes the gate's last trusted seal to b when it is
// not the one the index holds.
func (ps *partSeals) storeTrustedSeal(b *pebble.Batch) error {
	note, off := ps.gate.LastTrusted()
	if note == nil {
		off = -1
	}
	if off == ps.seedOff {
		return nil
	}
	var err error
	if note == nil {
		err = b.Delete(trustedSealKey(ps.origin), nil)
	} else {
		err = b.Set(trustedSealKey(ps.origin), append(binary.BigEndian.AppendUint64(nil, uint64(off)), note...), nil)
	}
	if err != nil {
		return fmt.Errorf("console index: store the last trusted seal of %s: %w", ps.origin, err)
	}
	ps.seedOff = off
	return nil
}

// reset goes on after the gate refused a chain with its successor, which
// holds the next seal to the last seal it trusted (trustlog.SealGate's rule,
// as restore and the audit apply it): a copy of an older transaction,
// appended after a refused chain, does not start a new one.
func (ps *partSeals) reset() {
	ps.gate = ps.gate.Successor()
}

// trust takes r as covered by a trusted seal.
func (ps *partSeals) trust(r *kgo.Record) {
	ps.out = append(ps.out, r)
}

// add passes the partition's next committed data record.
func (ps *partSeals) add(rec *kgo.Record) {
	if !ps.started {
		ps.started = true
		if rec.Offset > ps.from {
			// Retention deleted what the console had not read, and with
			// it the seals after the last one trusted: the chain starts
			// again, as for a reader that never read the partition.
			ps.gate = trustlog.NewSealGate(ps.origin, ps.tk)
			ps.gate.StartsAfterGap()
		}
	}
	if rec.Attrs.IsControl() {
		return
	}
	if wire.JournalKind(rec) != schemas.KindSeal {
		ps.buf = append(ps.buf, rec)
		if len(ps.buf) > maxUnsealed {
			// Bounded memory: no executor's transaction is this long.
			ps.refuse(ps.buf[:1], fmt.Sprintf("no seal follows it within %d records", maxUnsealed))
			ps.buf = ps.buf[1:]
		}
		return
	}
	batch := ps.buf
	ps.buf = nil
	if cut, why := trustlog.SealCut(ps.origin, rec.Offset, rec.Value, len(batch)); cut > 0 {
		ps.refuse(batch[:cut], why)
		batch = batch[cut:]
	}
	cur := append(batch, rec)
	if ps.feed(cur) && ps.gate.Sealed() >= 1000 {
		ps.release()
	}
}

// feed hands one transaction, its seal last, to the gate; false if the
// gate refused something.
func (ps *partSeals) feed(cur []*kgo.Record) bool {
	seal := cur[len(cur)-1]
	for _, r := range cur[:len(cur)-1] {
		ps.gate.Add(r.Offset, trust.RecordLeafHash(r), r)
	}
	ps.inGate = append(ps.inGate, cur...)
	skipped := ps.gate.Skipped()
	err := ps.gate.AddSeal(seal.Offset, seal.Value, trust.RecordLeafHash(seal), seal)
	if err == nil {
		if ps.gate.Skipped() > skipped {
			// The end of a transaction whose beginning retention
			// deleted: passed over, as restore does.
			ps.inGate = nil
		}
		return true
	}
	old := ps.gate
	ps.refuseErr(err)
	// What the old gate had covered before this transaction.
	if rel, err := old.Release(); err != nil {
		ps.refuseErr(err)
	} else {
		ps.released(rel)
	}
	ps.reset()
	// Left in the gate: records before this transaction that the old gate
	// had found covered by a checked seal (its Release failed only on a
	// later chain), and the records of this transaction no error named:
	// the gate refused an earlier chain, not this one, which starts a
	// chain of its own.
	var rest []*kgo.Record
	for _, r := range ps.inGate {
		if r.Offset < cur[0].Offset {
			ps.trust(r)
		} else {
			rest = append(rest, r)
		}
	}
	ps.inGate = nil
	if len(rest) == 0 {
		return false
	}
	if rest[len(rest)-1] != seal {
		ps.refuse(rest, "part of a transaction whose seal was refused")
		return false
	}
	for _, r := range rest[:len(rest)-1] {
		ps.gate.Add(r.Offset, trust.RecordLeafHash(r), r)
	}
	ps.inGate = rest
	if err := ps.gate.AddSeal(seal.Offset, seal.Value, trust.RecordLeafHash(seal), seal); err != nil {
		ps.refuse(ps.inGate, whyOf(err))
		ps.inGate = nil
		ps.reset()
		return false
	}
	return false
}

// release checks the last seal's signature and takes what trusted seals
// covered.
func (ps *partSeals) release() {
	rel, err := ps.gate.Release()
	if err != nil {
		ps.refuseErr(err)
		// What the error does not name, the gate had found covered by
		// an earlier, checked seal.
		for _, r := range ps.inGate {
			ps.trust(r)
		}
		ps.inGate = nil
		ps.reset()
		return
	}
	ps.released(rel)
}

func (ps *partSeals) released(rel []any) {
	if len(rel) == 0 {
		return
	}
	done := make(map[int64]bool, len(rel))
	for _, v := range rel {
		r := v.(*kgo.Record)
		done[r.Offset] = true
		ps.trust(r)
	}
	ps.drop(done)
}

// refuseErr refuses the records in the gate that err names.
func (ps *partSeals) refuseErr(err error) {
	ue, ok := errors.AsType[*trustlog.UnsignedError](err)
	if !ok {
		ps.refuse(ps.inGate, whyOf(err))
		ps.inGate = nil
		return
	}
	var rs []*kgo.Record
	done := map[int64]bool{}
	for _, r := range ps.inGate {
		if r.Offset >= ue.From && r.Offset <= ue.To {
			rs = append(rs, r)
			done[r.Offset] = true
		}
	}
	ps.refuse(rs, ue.Why)
	ps.drop(done)
}

// whyOf is the reason an error of the gate gives.
func whyOf(err error) string {
	if ue, ok := errors.AsType[*trustlog.UnsignedError](err); ok {
		return ue.Why
	}
	return err.Error()
}

func (ps *partSeals) drop(done map[int64]bool) {
	kept := ps.inGate[:0]
	for _, r := range ps.inGate {
		if !done[r.Offset] {
			kept = append(kept, r)
		}
	}
	ps.inGate = kept
}

func (ps *partSeals) refuse(rs []*kgo.Record, why string) {
	for _, r := range rs {
		ps.refused = append(ps.refused, refusal{r, why})
	}
}

// flush ends a fetch of the partition: it returns the records trusted
// seals covered and those refused since the last flush, in offset order,
// and the offset to resume at after a restart.
func (ps *partSeals) flush(next int64) (out []*kgo.Record, refused []refusal, resume int64) {
	ps.release()
	out, refused = ps.out, ps.refused
	ps.out, ps.refused = nil, nil
	resume = next
	if len(ps.buf) > 0 {
		resume = ps.buf[0].Offset
	}
	return out, refused, resume
}

// maxUnsealed bounds the records of a partition kept waiting for a seal;
// an executor's transaction holds at most a few records per command of
// one poll (MaxPollRecords, 500 by default).
const maxUnsealed = 100_000

const pendingWhy = "no seal follows it yet: a record of a transaction still being read, or one appended by a writer without an executor key"

// unsignedOf is what the index keeps of a record no trusted seal covers
// (nil: not a decodable execution record, so no execution to show it on).
func unsignedOf(rec *kgo.Record, why string, pending bool) (id []byte, u *UnsignedRecord) {
	if wire.JournalKind(rec) != schemas.KindRecord || rec.Value == nil {
		return nil, nil
	}
	r, err := schemas.UnmarshalRecord(rec.Value)
	if err != nil {
		return nil, nil
	}
	return execID(r.Entity, r.IdempotencyKey), &UnsignedRecord{Partition: rec.Partition, Offset: rec.Offset, Time: rec.Timestamp, Record: &r, Why: why, Pending: pending}
}

func unsignedKey(id []byte, partition int32, offset int64) []byte {
	b := withPrefix(pfxUnsigned, id)
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	return binary.BigEndian.AppendUint64(b, uint64(offset))
}

// applySealed writes what one fetch of a journal partition settled:
// records trusted seals covered are applied, refused ones kept aside, and
// those no seal followed yet shown as pending. It returns the executor of
// the last record applied and the position to store.
func (p *Projection) applySealed(b *pebble.Batch, ps *partSeals, next int64) (string, int64, error) {
	out, refused, resume := ps.flush(next)
	if err := ps.storeTrustedSeal(b); err != nil {
		return "", 0, err
	}
	var lastW string
	for _, rec := range out {
		if id, ok := ps.marked[rec.Offset]; ok {
			delete(ps.marked, rec.Offset)
			if err := b.Delete(unsignedKey(id, rec.Partition, rec.Offset), nil); err != nil {
				return "", 0, err
			}
		}
		w, err := p.applyJournal(b, rec)
		if errors.Is(err, errUndecodable) {
			p.mu.Lock()
			p.mu.bad++
			p.mu.Unlock()
			p.log.Warn("console projection: skipped an entry it cannot decode", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
			continue
		}
		if err != nil {
			return "", 0, err
		}
		if w != "" {
			lastW = w
		}
	}
	if len(refused) > 0 {
		p.log.Error("console projection: journal records no trusted executor signature covers; not shown as any execution's state",
			"partition", refused[0].rec.Partition, "offsets", fmt.Sprintf("%d..%d", refused[0].rec.Offset, refused[len(refused)-1].rec.Offset),
			"count", len(refused), "why", refused[0].why)
	}
	for _, rf := range refused {
		delete(ps.marked, rf.rec.Offset)
		if err := p.putUnsigned(b, rf.rec, rf.why, false); err != nil {
			return "", 0, err
		}
	}
	for _, rec := range ps.buf {
		if _, ok := ps.marked[rec.Offset]; ok {
			continue
		}
		id, u := unsignedOf(rec, pendingWhy, true)
		if u == nil {
			continue
		}
		if err := setJSON(b, unsignedKey(id, rec.Partition, rec.Offset), u); err != nil {
			return "", 0, err
		}
		ps.marked[rec.Offset] = id
	}
	return lastW, resume, nil
}

// putUnsigned keeps rec aside as a record no trusted seal covers.
func (p *Projection) putUnsigned(b *pebble.Batch, rec *kgo.Record, why string, pending bool) error {
	id, u := unsignedOf(rec, why, pending)
	if u == nil {
		return nil
	}
	return setJSON(b, unsignedKey(id, rec.Partition, rec.Offset), u)
}

// dropPending forgets, at start, the records shown as pending: the
// stored positions are before them, so they are read and judged again.
func (p *Projection) dropPending() error {
	b := p.db.NewBatch()
	defer b.Close()
	err := p.scan([]byte{pfxUnsigned}, func(k, v []byte) (bool, error) {
		var u UnsignedRecord
		if err := jsonUnmarshal(v, &u); err != nil {
			return false, err
		}
		if u.Pending {
			return true, b.Delete(k, nil)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("console index: %w", err)
	}
	return nil
}

// unsigned returns the records of the execution id that no trusted seal
// covers, in partition and offset order.
func (p *Projection) unsigned(id []byte) ([]UnsignedRecord, error) {
	var out []UnsignedRecord
	err := p.scan(withPrefix(pfxUnsigned, id), func(_, v []byte) (bool, error) {
		var u UnsignedRecord
		if err := jsonUnmarshal(v, &u); err != nil {
			return false, err
		}
		out = append(out, u)
		return true, nil
	})
	return out, err
}

// HasUnsigned reports whether the execution of key for entity has
// journal records no trusted seal covers.
func (p *Projection) HasUnsigned(entity, key string) (bool, error) {
	found := false
	err := p.scan(withPrefix(pfxUnsigned, execID(entity, key)), func(_, _ []byte) (bool, error) {
		found = true
		return false, nil
	})
	return found, err
}

// UnsignedCount counts the journal records kept aside because no trusted
// seal covers them, up to limit.
func (p *Projection) UnsignedCount(limit int) (int, error) {
	n := 0
	err := p.scan([]byte{pfxUnsigned}, func(_, _ []byte) (bool, error) {
		n++
		return n < limit, nil
	})
	return n, err
}

// Checking says how the projection treats the journal's seals: "checked"
// (trusted keys given), "unchecked" (none given, and the journal carries
// seals) or "" (none given, no seal seen).
func (p *Projection) Checking() string {
	if p.trusted != nil {
		return "checked"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.sealsSeen {
		return "unchecked"
	}
	return ""
}
