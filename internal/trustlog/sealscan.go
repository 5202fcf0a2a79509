package trustlog

import (
	"cmp"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// SealScan checks one journal partition's seals for a reader that reports
// rather than acts (the audits, explain): where restore holds the
// partition at the first record no trusted seal covers, a scan names it
// and goes on, so that every such stretch is named, not only the first.
type SealScan struct {
	origin   string
	trusted  *trust.TrustedKeys
	g        *SealGate
	unsigned []*UnsignedError
	skipped  int   // passed over after a retention gap, by gates replaced
	out      []any // released, not yet returned
}

// NewSealScan checks the partition named origin; afterGap: retention
// deleted its beginning (SealGate.StartsAfterGap).
func NewSealScan(origin string, tk *trust.TrustedKeys, afterGap bool) *SealScan {
	c := &SealScan{origin: origin, trusted: tk, g: NewSealGate(origin, tk)}
	if afterGap {
		c.g.StartsAfterGap()
	}
	return c
}

// Add passes the partition's next committed data record, in offset
// order, with v, and returns the values of the records that trusted seals
// have covered since the last call, in order; the values of records no
// trusted seal covers are never returned.
func (c *SealScan) Add(r *kgo.Record, v any) []any {
	h := trust.RecordLeafHash(r)
	if wire.JournalKind(r) != schemas.KindSeal {
		c.g.Add(r.Offset, h, v)
		return c.take()
	}
	if cut, why := SealCut(c.origin, r.Offset, r.Value, len(c.g.pending)); cut > 0 {
		// Records before this transaction that no seal covers: named
		// here, and the transaction judged on its own (a gate refuses
		// both at once, which is right for restore, that stops there, and
		// would lose a real transaction after a forged record here).
		c.unsigned = append(c.unsigned, c.g.unsigned(c.g.pending[:cut], why).(*UnsignedError))
		c.g.pending = c.g.pending[cut:]
	}
	if err := c.g.AddSeal(r.Offset, r.Value, h, v); err != nil {
		c.fail(err)
		return c.take()
	}
	// Bounded memory: the signature is checked, and what it covers
	// released, every 1 000 records at least.
	if c.g.Sealed() >= 1000 {
		c.release()
	}
	return c.take()
}

func (c *SealScan) release() {
	rs, err := c.g.Release()
	if err != nil {
		c.fail(err)
		return
	}
	c.out = append(c.out, rs...)
}

func (c *SealScan) take() []any {
	out := c.out
	c.out = nil
	return out
}

// fail records what the gate refused and goes on after it with the
// gate's successor, which holds the next seal to the last trusted one.
// What the old gate had already found covered is kept.
func (c *SealScan) fail(err error) {
	ue, ok := errors.AsType[*UnsignedError](err)
	if !ok {
		ue = &UnsignedError{Origin: c.origin, Why: err.Error()}
	}
	c.unsigned = append(c.unsigned, ue)
	// A refusal that is not a chain's end (a malformed seal, a digest
	// that does not match) leaves the chain before it unchecked: check
	// it now, so that its records are released and the successor chains
	// to its last seal, or name it once if it is not trusted either.
	if err := c.g.checkLast(); err != nil {
		if u, ok := errors.AsType[*UnsignedError](err); ok && (u.From != ue.From || u.To != ue.To) {
			c.unsigned = append(c.unsigned, u)
		}
	}
	c.skipped += c.g.Skipped()
	c.out = append(c.out, c.g.ready...)
	c.g = c.g.Successor()
}

// End judges what remains after the partition's last record. It returns
// the values of the records trusted seals covered since the last Add,
// every stretch of records no trusted seal covers, in offset order, and
// how many records after a retention gap could not be checked.
func (c *SealScan) End() (released []any, unsigned []*UnsignedError, skipped int) {
	g := c.g
	c.release()
	// The records after the last seal, even when that seal was refused.
	if err := g.End(); err != nil {
		c.fail(err)
	}
	slices.SortFunc(c.unsigned, func(a, b *UnsignedError) int { return cmp.Compare(a.From, b.From) })
	return c.take(), c.unsigned, c.skipped + c.g.Skipped()
}
