package trust

import (
	"cmp"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// SealScan checks one journal partition's seals for a reader that reports
// rather than acts (the audits, explain): where restore holds the
// partition at the first record no trusted seal covers, a scan names it
// and goes on, so that every such stretch is named, not only the first.
type SealScan struct {
	origin   string
	trusted  *TrustedKeys
	g        *SealGate
	unsigned []*UnsignedError
	skipped  int // passed over after a retention gap, by gates replaced
}

// NewSealScan checks the partition named origin; afterGap: retention
// deleted its beginning (SealGate.StartsAfterGap).
func NewSealScan(origin string, tk *TrustedKeys, afterGap bool) *SealScan {
	c := &SealScan{origin: origin, trusted: tk, g: NewSealGate(origin, tk)}
	if afterGap {
		c.g.StartsAfterGap()
	}
	return c
}

// Add passes the partition's next committed data record, in offset order.
func (c *SealScan) Add(r *kgo.Record) {
	h := RecordLeafHash(r)
	if schemas.JournalKind(r) != schemas.KindSeal {
		c.g.Add(r.Offset, h, nil)
		return
	}
	if err := c.g.AddSeal(r.Offset, r.Value, h, nil); err != nil {
		c.fail(err)
		return
	}
	// Bounded memory: the signature is checked, and what it covers
	// dropped, every 10 000 records at least.
	if c.g.Sealed() >= 10_000 {
		if _, err := c.g.Release(); err != nil {
			c.fail(err)
		}
	}
}

// fail records what the gate refused and starts again after it with a
// gate that has seen nothing: the next seal starts a chain.
func (c *SealScan) fail(err error) {
	ue, ok := errors.AsType[*UnsignedError](err)
	if !ok {
		ue = &UnsignedError{Origin: c.origin, Why: err.Error()}
	}
	c.unsigned = append(c.unsigned, ue)
	c.skipped += c.g.Skipped()
	c.g = NewSealGate(c.origin, c.trusted)
}

// End judges what remains after the partition's last record. It returns
// every stretch of records no trusted seal covers, in offset order, and
// how many records after a retention gap could not be checked.
func (c *SealScan) End() (unsigned []*UnsignedError, skipped int) {
	if _, err := c.g.Release(); err != nil {
		c.fail(err)
	} else if err := c.g.End(); err != nil {
		c.fail(err)
	}
	slices.SortFunc(c.unsigned, func(a, b *UnsignedError) int { return cmp.Compare(a.From, b.From) })
	return c.unsigned, c.skipped + c.g.Skipped()
}
