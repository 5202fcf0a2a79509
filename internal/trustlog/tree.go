package trustlog

import (
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
)

var rangeFactory = &compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}

// Tree is one partition's Merkle tree as a compact range from leaf 0: at
// most log2(size)+1 hashes, whatever the size, so an executor keeps one per
// owned partition and an auditor one per partition it replays.
type Tree struct {
	r *compact.Range
}

// NewTree is the empty tree.
func NewTree() *Tree { return &Tree{r: rangeFactory.NewEmptyRange(0)} }

// ResumeTree is the tree of size leaves whose compact range is hashes (as
// Tree.Hashes gave them), e.g. from a checkpoint record: the caller checks
// its Root against the checkpoint's signed root before trusting it.
func ResumeTree(size uint64, hashes [][]byte) (*Tree, error) {
	r, err := rangeFactory.NewRange(0, size, hashes)
	if err != nil {
		return nil, fmt.Errorf("compact range of %d leaves: %w", size, err)
	}
	return &Tree{r: r}, nil
}

// Append adds one leaf by its leaf hash.
func (t *Tree) Append(leafHash []byte) {
	// Append fails only on a hash of the wrong length, which LeafHash
	// never returns.
	if err := t.r.Append(leafHash, nil); err != nil {
		panic(fmt.Sprintf("trust: append leaf: %v", err))
	}
}

// Size is the number of leaves.
func (t *Tree) Size() uint64 { return t.r.End() }

// Root is the RFC 6962 root hash (the hash of the empty string for an
// empty tree).
func (t *Tree) Root() []byte {
	if t.r.End() == 0 {
		return rfc6962.DefaultHasher.EmptyRoot()
	}
	h, err := t.r.GetRootHash(nil)
	if err != nil {
		panic(fmt.Sprintf("trust: root of a range from 0: %v", err))
	}
	return h
}

// Clone is an independent copy.
func (t *Tree) Clone() *Tree {
	c, err := ResumeTree(t.Size(), t.Hashes())
	if err != nil {
		panic(fmt.Sprintf("trust: clone: %v", err))
	}
	return c
}

// Hashes is the compact range (copy), enough to resume the tree.
func (t *Tree) Hashes() [][]byte {
	hs := t.r.Hashes()
	out := make([][]byte, len(hs))
	for i, h := range hs {
		out[i] = append([]byte(nil), h...)
	}
	return out
}
