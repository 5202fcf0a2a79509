package trustlog

import (
	"crypto/sha256"
	"fmt"

	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/tlog"
)

// Log is a whole partition's tree with every stored node hash (about 2
// hashes per leaf): what an auditor replaying the journal needs to prove
// inclusion and consistency at any size. Executors keep a Tree instead.
type Log struct {
	hashes []tlog.Hash
	leaves []int64 // stored-hash index of each leaf, for LeafHashAt
}

// Append adds a leaf by its leaf hash.
func (l *Log) Append(leafHash []byte) {
	n := int64(len(l.leaves))
	hs, err := tlog.StoredHashesForRecordHash(n, tlog.Hash(leafHash), l)
	if err != nil {
		panic(fmt.Sprintf("trust: stored hashes of leaf %d: %v", n, err)) // reads only hashes it stored
	}
	l.leaves = append(l.leaves, int64(len(l.hashes)))
	l.hashes = append(l.hashes, hs...)
}

// ReadHashes implements tlog.HashReader over the stored hashes.
func (l *Log) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(l.hashes)) {
			return nil, fmt.Errorf("stored hash %d not in a log of %d", x, len(l.hashes))
		}
		out[i] = l.hashes[x]
	}
	return out, nil
}

// Size is the number of leaves.
func (l *Log) Size() uint64 { return uint64(len(l.leaves)) }

// RootAt is the root hash of the first size leaves.
func (l *Log) RootAt(size uint64) ([]byte, error) {
	if size > l.Size() {
		return nil, fmt.Errorf("tree of size %d asked of a log of %d leaves", size, l.Size())
	}
	if size == 0 {
		return rfc6962.DefaultHasher.EmptyRoot(), nil
	}
	h, err := tlog.TreeHash(int64(size), l)
	if err != nil {
		return nil, err
	}
	return h[:], nil
}

// Inclusion proves leaf index in the tree of size leaves.
func (l *Log) Inclusion(index, size uint64) ([][sha256.Size]byte, error) {
	p, err := tlog.ProveRecord(int64(size), int64(index), l)
	if err != nil {
		return nil, fmt.Errorf("inclusion proof of leaf %d in tree %d: %w", index, size, err)
	}
	out := make([][sha256.Size]byte, len(p))
	for i, h := range p {
		out[i] = h
	}
	return out, nil
}

// Consistency proves the tree of size1 leaves a prefix of that of size2.
func (l *Log) Consistency(size1, size2 uint64) ([][]byte, error) {
	if size1 == 0 || size1 == size2 {
		return nil, nil
	}
	p, err := tlog.ProveTree(int64(size2), int64(size1), l)
	if err != nil {
		return nil, fmt.Errorf("consistency proof %d..%d: %w", size1, size2, err)
	}
	out := make([][]byte, len(p))
	for i := range p {
		out[i] = p[i][:]
	}
	return out, nil
}
