package audit

import (
	"cmp"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// CheckJournalSigned: every journal record is covered by a transaction
// seal signed by a trusted executor key (docs/trust.md#signed-transactions).
// Checked only when trusted keys are given (Options.Trusted).
const CheckJournalSigned = "journal_signed"

// sealChecker checks one journal partition's seals, as restore does with
// --require-signed-journal, but goes on after records no trusted seal
// covers so that every such stretch is named, not only the first.
type sealChecker struct {
	origin   string
	trusted  *trust.TrustedKeys
	g        *trust.SealGate
	unsigned []*trust.UnsignedError
	skipped  int // passed over after a retention gap, by gates replaced
}

// newSealChecker checks the partition named origin; afterGap: retention
// deleted its beginning (trust.SealGate.StartsAfterGap).
func newSealChecker(origin string, tk *trust.TrustedKeys, afterGap bool) *sealChecker {
	c := &sealChecker{origin: origin, trusted: tk, g: trust.NewSealGate(origin, tk)}
	if afterGap {
		c.g.StartsAfterGap()
	}
	return c
}

// add passes the partition's next record (control records excluded).
func (c *sealChecker) add(r *kgo.Record) {
	h := trust.RecordLeafHash(r)
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
func (c *sealChecker) fail(err error) {
	var ue *trust.UnsignedError
	if !errors.As(err, &ue) {
		ue = &trust.UnsignedError{Origin: c.origin, Why: err.Error()}
	}
	c.unsigned = append(c.unsigned, ue)
	c.skipped += c.g.Skipped()
	c.g = trust.NewSealGate(c.origin, c.trusted)
}

// end judges what remains after the partition's last record and returns
// every stretch of records no trusted seal covers, in offset order, and
// how many records after a retention gap could not be checked.
func (c *sealChecker) end() ([]*trust.UnsignedError, int) {
	if _, err := c.g.Release(); err != nil {
		c.fail(err)
	} else if err := c.g.End(); err != nil {
		c.fail(err)
	}
	slices.SortFunc(c.unsigned, func(a, b *trust.UnsignedError) int { return cmp.Compare(a.From, b.From) })
	return c.unsigned, c.skipped + c.g.Skipped()
}
