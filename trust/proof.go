package trust

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/transparency-dev/formats/proof"
	merkleproof "github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// VerifyConsistency checks that the tree (size1, root1) is a prefix of
// (size2, root2), RFC 6962 §2.1.2 (RFC 9162 §2.1.4.2).
func VerifyConsistency(size1, size2 uint64, p [][]byte, root1, root2 []byte) error {
	return merkleproof.VerifyConsistency(rfc6962.DefaultHasher, size1, size2, p, root1, root2)
}

// Proof is a record with its inclusion proof against a checkpoint: a C2SP
// tlog-proof bundle (c2sp.org/tlog-proof@v1) whose "extra" data is the
// leaf data (LeafData) of the record.
type Proof struct {
	Index      uint64
	Hashes     [][sha256.Size]byte
	Checkpoint []byte
	Leaf       []byte
}

// Marshal is the bundle's text.
func (p Proof) Marshal() []byte {
	return proof.TLogProof{Index: p.Index, Hashes: p.Hashes, Checkpoint: p.Checkpoint, ExtraData: p.Leaf}.Marshal()
}

// ErrProof classifies every refusal of CheckProof.
var ErrProof = errors.New("proof refused")

// ParseProof parses a bundle. It reads the format of
// transparency-dev/formats' TLogProof.Unmarshal without its 64 KiB line
// limit, since the extra line carries a whole record.
func ParseProof(b []byte) (Proof, error) {
	var p Proof
	const header = "c2sp.org/tlog-proof@v1\n"
	rest, ok := bytes.CutPrefix(b, []byte(header))
	if !ok {
		return p, fmt.Errorf("%w: does not start with %q", ErrProof, header[:len(header)-1])
	}
	next := func() (string, bool) {
		l, r, ok := bytes.Cut(rest, []byte("\n"))
		if !ok {
			return "", false
		}
		rest = r
		return string(l), true
	}
	l, ok := next()
	if v, isExtra := bytes.CutPrefix([]byte(l), []byte("extra ")); ok && isExtra {
		var err error
		if p.Leaf, err = base64.StdEncoding.DecodeString(string(v)); err != nil {
			return p, fmt.Errorf("%w: extra line is not base64: %v", ErrProof, err)
		}
		l, ok = next()
	}
	v, isIndex := bytes.CutPrefix([]byte(l), []byte("index "))
	if !ok || !isIndex {
		return p, fmt.Errorf("%w: truncated: no \"index N\" line", ErrProof)
	}
	var err error
	if p.Index, err = strconv.ParseUint(string(v), 10, 64); err != nil {
		return p, fmt.Errorf("%w: index %q is not a number", ErrProof, v)
	}
	for {
		l, ok := next()
		if !ok {
			return p, fmt.Errorf("%w: truncated: no empty line before the checkpoint", ErrProof)
		}
		if l == "" {
			break
		}
		h, err := base64.StdEncoding.DecodeString(l)
		if err != nil || len(h) != sha256.Size {
			return p, fmt.Errorf("%w: proof line %d is not a base64 SHA-256 hash", ErrProof, len(p.Hashes)+1)
		}
		p.Hashes = append(p.Hashes, [sha256.Size]byte(h))
	}
	if len(rest) == 0 {
		return p, fmt.Errorf("%w: truncated: no checkpoint", ErrProof)
	}
	p.Checkpoint = rest
	return p, nil
}

// CheckProof verifies a bundle offline: its checkpoint is signed by a
// trusted key, and its leaf is at its index of the checkpoint's tree. It
// returns the checkpoint and the leaf's record.
func CheckProof(b []byte, tk *TrustedKeys) (*Checkpoint, Leaf, error) {
	p, err := ParseProof(b)
	if err != nil {
		return nil, Leaf{}, err
	}
	cp, err := OpenCheckpoint(p.Checkpoint, tk, nil)
	if err != nil {
		return nil, Leaf{}, err
	}
	if p.Leaf == nil {
		return nil, Leaf{}, fmt.Errorf("%w: no extra line: the bundle carries no record", ErrProof)
	}
	lf, err := SplitLeafData(p.Leaf)
	if err != nil {
		return nil, Leaf{}, fmt.Errorf("%w: %v", ErrProof, err)
	}
	hs := make([][]byte, len(p.Hashes))
	for i := range p.Hashes {
		hs[i] = p.Hashes[i][:]
	}
	if p.Index >= cp.Size {
		return nil, Leaf{}, fmt.Errorf("%w: index %d is outside the checkpoint's tree of %d leaves", ErrProof, p.Index, cp.Size)
	}
	if err := merkleproof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, cp.Size, LeafHash(p.Leaf), hs, cp.Root); err != nil {
		return nil, Leaf{}, fmt.Errorf("%w: the record is not leaf %d of %s size %d: %v", ErrProof, p.Index, cp.Origin, cp.Size, err)
	}
	return cp, lf, nil
}
