package trustlog

import (
	"bytes"
	"fmt"

	"github.com/onceflight/onceflight/trust"
)

// UnsignedError names journal records no trusted seal covers.
type UnsignedError struct {
	Origin   string
	From, To int64 // offsets, inclusive
	Count    int
	Why      string
}

func (e *UnsignedError) Error() string {
	return fmt.Sprintf("%s: %d journal record(s) at offsets %d..%d are not covered by a trusted executor signature: %s",
		e.Origin, e.Count, e.From, e.To, e.Why)
}

// SealGate passes on, in order, the records of one journal partition that
// a trusted seal covers, and refuses the others. Signatures are checked
// once per chain of seals and per Release, not per seal: a seal's prev
// names its predecessor, so the last seal's signature vouches for the
// chain before it (a forged seal in it breaks the chain at the next real
// one, which is then checked at once).
type SealGate struct {
	trusted *trust.TrustedKeys
	origin  string

	pending  []gated // since the last seal
	sealed   []gated // covered by the chain up to last; its signature unchecked
	ready    []any
	last     []byte // the last seal's note
	lastSeal trust.Seal
	lastOff  int64
	lastOK   bool

	// lastTrusted is the last seal whose signature was checked (lastOK): a
	// gate that takes over after refused records (Successor) chains to
	// it, so that a copy of an older transaction cannot start afresh.
	lastTrusted struct {
		note []byte
		seal trust.Seal
		off  int64
	}

	// skip: the partition's earlier records are gone (StartsAfterGap),
	// so what precedes the first seal read cannot be checked.
	skip    bool
	skipped int
}

type gated struct {
	off  int64
	hash []byte
	v    any
}

// NewSealGate checks the records of the partition named origin.
func NewSealGate(origin string, tk *trust.TrustedKeys) *SealGate {
	return &SealGate{trusted: tk, origin: origin}
}

// Successor is the gate that judges what follows records g refused: it
// has nothing pending, and the next seal must follow the last seal g
// trusted or start the chain of a later epoch (AddSeal). A gate that
// started afresh would take a copy of any older signed transaction,
// appended after a forged stretch, as the start of a new chain. SealScan
// and the console's projection both go on with it after a refusal.
func (g *SealGate) Successor() *SealGate {
	n := NewSealGate(g.origin, g.trusted)
	n.follow(g.lastTrusted.note, g.lastTrusted.seal, g.lastTrusted.off)
	return n
}

// follow makes the seal note (parsed: s) at offset off, already trusted,
// the one the next seal must follow (nothing if note is nil).
func (g *SealGate) follow(note []byte, s trust.Seal, off int64) {
	if note == nil {
		return
	}
	g.last, g.lastSeal, g.lastOff, g.lastOK = note, s, off, true
	g.lastTrusted.note, g.lastTrusted.seal, g.lastTrusted.off = note, s, off
}

// LastTrusted is the last seal whose signature g checked, as its note and
// its offset (nil if none). A reader that stops stores it with its
// position, so that the gate it goes on with (NewSealGateAfter) still
// refuses what a gate that never stopped would.
func (g *SealGate) LastTrusted() (note []byte, off int64) {
	return g.lastTrusted.note, g.lastTrusted.off
}

// NewSealGateAfter is the gate of a reader that goes on after the seal
// note at offset off, which a gate of the same partition trusted before
// the reader stopped (LastTrusted): as with Successor, the next seal must
// follow it or start the chain of a later epoch. A fresh gate would take
// any seal as its first, so a copy of an older signed transaction,
// appended while the reader was stopped, would pass. The note's signature
// is not checked again: it only constrains what follows, whose own seals
// are checked. A nil note is a fresh gate (NewSealGate).
func NewSealGateAfter(origin string, tk *trust.TrustedKeys, note []byte, off int64) (*SealGate, error) {
	g := NewSealGate(origin, tk)
	if note == nil {
		return g, nil
	}
	s, err := trust.ParseSeal(note)
	if err != nil {
		return nil, fmt.Errorf("%s: the last trusted seal, at offset %d: %w", origin, off, err)
	}
	if s.Origin != origin {
		return nil, fmt.Errorf("%s: the last trusted seal, at offset %d, is for %s", origin, off, s.Origin)
	}
	g.follow(note, s, off)
	return g, nil
}

// StartsAfterGap says the records before the first one passed were
// deleted (retention): the first records read may be the end of a
// transaction whose beginning is gone, so that the first seal covers more
// records than precede it, some nobody can read any more. Then they and
// that seal are passed over (Skipped counts them, Release never returns
// them) and checking starts after it; a first transaction read whole is
// checked as usual. Writers can only append, so what retention left before
// the first seal was not appended later by someone without a key; a
// forger needs to delete records too, and then only hides what stood
// there.
func (g *SealGate) StartsAfterGap() { g.skip = true }

// Skipped is the number of records passed over after StartsAfterGap.
func (g *SealGate) Skipped() int { return g.skipped }

// Add passes a record that is not a seal; v is returned by Release once a
// trusted seal covers it.
func (g *SealGate) Add(off int64, leafHash []byte, v any) {
	g.pending = append(g.pending, gated{off, leafHash, v})
}

// SealCut is where the seal msg, read at offset off after n records of
// the partition origin that no seal covers yet, cuts them: a seal covers
// the records immediately before it, as many as it counts, so the first
// cut of the n are covered by none, for why. cut is 0 when the seal covers
// all n, and also when msg is not a seal of origin or counts more than n
// records: AddSeal then refuses all n with the seal. SealScan and the
// console refuse the first cut on their own and judge the rest with the
// seal; AddSeal refuses them with the same rule.
func SealCut(origin string, off int64, msg []byte, n int) (cut int, why string) {
	s, err := trust.ParseSeal(msg)
	if err != nil || s.Origin != origin || s.Records > n {
		return 0, ""
	}
	return cutAt(s, off, n)
}

// cutAt is SealCut's rule for a seal s of the partition that counts at
// most n records.
func cutAt(s trust.Seal, off int64, n int) (cut int, why string) {
	cut = n - s.Records
	if cut == 0 {
		return 0, ""
	}
	return cut, fmt.Sprintf("no seal covers them (the next seal, at offset %d, covers only the %d records after them)", off, s.Records)
}

func (g *SealGate) unsigned(items []gated, why string) error {
	return &UnsignedError{Origin: g.origin, From: items[0].off, To: items[len(items)-1].off, Count: len(items), Why: why}
}

// AddSeal passes a seal record (its value msg); the seal itself is a
// record and is released with those it covers.
func (g *SealGate) AddSeal(off int64, msg, leafHash []byte, v any) error {
	s, err := trust.ParseSeal(msg)
	self := gated{off, leafHash, v}
	if g.skip {
		g.skip = false
		if err == nil && s.Origin == g.origin && s.Records > len(g.pending) {
			// The end of a transaction cut by retention.
			g.skipped += len(g.pending) + 1
			g.pending = nil
			return nil
		}
	}
	if err != nil {
		return g.unsigned(append(g.pending, self), fmt.Sprintf("the seal at offset %d is malformed: %v", off, err))
	}
	if s.Origin != g.origin {
		return g.unsigned(append(g.pending, self), fmt.Sprintf("the seal at offset %d is for %s", off, s.Origin))
	}
	if s.Records > len(g.pending) {
		return g.unsigned(append(g.pending, self), fmt.Sprintf("the seal at offset %d covers %d records, %d precede it", off, s.Records, len(g.pending)))
	}
	cut, why := cutAt(s, off, len(g.pending))
	covered := g.pending[cut:]
	hs := make([][]byte, len(covered))
	for i, c := range covered {
		hs[i] = c.hash
	}
	if !bytes.Equal(trust.DigestLeaves(hs), s.Digest) {
		return g.unsigned(append(g.pending, self), fmt.Sprintf("the seal at offset %d does not match the %d records before it", off, s.Records))
	}
	if cut > 0 {
		return g.unsigned(g.pending[:cut], why)
	}
	switch {
	case g.last == nil:
		// The first seal read: nothing to chain to.
	case s.Prev == nil || !bytes.Equal(s.Prev, trust.SealHash(g.last)):
		// A new chain (a new owner), or a break: the chain before ends
		// here, so its last seal is checked now.
		if err := g.checkLast(); err != nil {
			return err
		}
		if s.Prev != nil {
			return g.unsigned(append(covered, self), fmt.Sprintf("the seal at offset %d does not follow the seal at offset %d", off, g.lastOff))
		}
		// Every owner's epoch is above the ones before it, so a chain
		// that starts at or below the last one is a copy of an old
		// owner's first transaction, appended again.
		if s.Epoch <= g.lastSeal.Epoch {
			return g.unsigned(append(covered, self), fmt.Sprintf("the seal at offset %d starts a chain of epoch %d after the seal at offset %d of epoch %d: a transaction copied from earlier in the journal", off, s.Epoch, g.lastOff, g.lastSeal.Epoch))
		}
	}
	g.sealed = append(append(g.sealed, covered...), self)
	g.pending = nil
	g.last, g.lastSeal, g.lastOff, g.lastOK = msg, s, off, false
	return nil
}

// checkLast checks the last seal's signature, which makes the chain up to
// it trusted.
func (g *SealGate) checkLast() error {
	if g.last == nil || len(g.sealed) == 0 && g.lastOK {
		return nil
	}
	if !g.lastOK {
		if _, err := trust.OpenSeal(g.last, g.trusted); err != nil {
			return g.unsigned(g.sealed, fmt.Sprintf("the seal at offset %d covering them is not trusted: %v", g.lastOff, err))
		}
		g.lastOK = true
		g.lastTrusted.note, g.lastTrusted.seal, g.lastTrusted.off = g.last, g.lastSeal, g.lastOff
	}
	for _, s := range g.sealed {
		g.ready = append(g.ready, s.v)
	}
	g.sealed = nil
	return nil
}

// Sealed is the number of records covered by seals whose signature is
// not yet checked: the caller Releases when it wants them.
func (g *SealGate) Sealed() int { return len(g.sealed) }

// Release checks the last seal's signature and returns every record
// covered by trusted seals so far, in order.
func (g *SealGate) Release() ([]any, error) {
	if err := g.checkLast(); err != nil {
		return nil, err
	}
	out := g.ready
	g.ready = nil
	return out, nil
}

// End reports the records no seal followed. At the end of what was
// read, after Release.
func (g *SealGate) End() error {
	if len(g.pending) == 0 {
		return nil
	}
	return g.unsigned(g.pending, "no seal follows them")
}

// Idle reports whether nothing is held back (a caller may then move its
// position past control records).
func (g *SealGate) Idle() bool { return len(g.pending) == 0 && len(g.sealed) == 0 && len(g.ready) == 0 }
