package trust

import (
	"encoding/binary"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
)

// leafTag starts every leaf so that leaf data can never be mistaken for
// another structure signed or hashed by Onceflight.
const leafTag = "onceflight-journal-leaf/v1"

// LeafData is the byte string a journal record contributes to its
// partition's tree: the tag, then the record's kind header, key and value,
// each preceded by its length as a 4-byte big-endian integer. The kind and
// key are covered too: a record whose kind header were changed would be
// read differently by restore although its value is the same.
func LeafData(kind string, key, value []byte) []byte {
	n := 4*4 + len(leafTag) + len(kind) + len(key) + len(value)
	b := make([]byte, 0, n)
	for _, f := range [][]byte{[]byte(leafTag), []byte(kind), key, value} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// SplitLeafData is LeafData's inverse, for proofs that carry the leaf.
func SplitLeafData(b []byte) (kind string, key, value []byte, err error) {
	var fs [4][]byte
	for i := range fs {
		if len(b) < 4 {
			return "", nil, nil, fmt.Errorf("leaf data is truncated (field %d of 4)", i+1)
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(len(b)) < uint64(n) {
			return "", nil, nil, fmt.Errorf("leaf data is truncated (field %d of 4 wants %d bytes, %d left)", i+1, n, len(b))
		}
		fs[i], b = b[:n], b[n:]
	}
	if len(b) != 0 {
		return "", nil, nil, fmt.Errorf("leaf data has %d bytes after its 4 fields", len(b))
	}
	if string(fs[0]) != leafTag {
		return "", nil, nil, fmt.Errorf("leaf data does not start with %q", leafTag)
	}
	return string(fs[1]), fs[2], fs[3], nil
}

// LeafHash is the RFC 6962 leaf hash: SHA-256(0x00 || data).
func LeafHash(data []byte) []byte { return rfc6962.DefaultHasher.HashLeaf(data) }

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

// AppendLeaf adds one journal record.
func (t *Tree) AppendLeaf(kind string, key, value []byte) {
	t.Append(LeafHash(LeafData(kind, key, value)))
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

// Hashes is the compact range (copy), enough to resume the tree.
func (t *Tree) Hashes() [][]byte {
	hs := t.r.Hashes()
	out := make([][]byte, len(hs))
	for i, h := range hs {
		out[i] = append([]byte(nil), h...)
	}
	return out
}
