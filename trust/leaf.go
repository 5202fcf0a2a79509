package trust

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/twmb/franz-go/pkg/kgo"
)

// leafTag starts every leaf so that leaf data can never be mistaken for
// another structure signed or hashed by Onceflight.
const leafTag = "onceflight-journal-leaf/v1"

// Header is a Kafka record header, as a leaf covers it.
type Header struct{ Key, Value string }

// LeafData is the byte string a journal record contributes to its
// partition's tree: the tag, the record's key, its value, the number of
// headers and each header's key and value, every string preceded by its
// length as a 4-byte big-endian integer (the count is such an integer
// too). Headers are covered because restore reads them (the kind header
// tells a record from a marker): a changed header is a changed record.
func LeafData(key, value []byte, headers []Header) []byte {
	n := 4*5 + len(leafTag) + len(key) + len(value)
	for _, h := range headers {
		n += 8 + len(h.Key) + len(h.Value)
	}
	b := make([]byte, 0, n)
	field := func(f []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	field([]byte(leafTag))
	field(key)
	field(value)
	b = binary.BigEndian.AppendUint32(b, uint32(len(headers)))
	for _, h := range headers {
		field([]byte(h.Key))
		field([]byte(h.Value))
	}
	return b
}

// Leaf is a journal record as a tree leaf holds it.
type Leaf struct {
	Key     []byte
	Value   []byte
	Headers []Header
}

// SplitLeafData is LeafData's inverse, for proofs that carry the leaf.
func SplitLeafData(b []byte) (Leaf, error) {
	var l Leaf
	var err error
	u32 := func(what string) uint32 {
		if err != nil {
			return 0
		}
		if len(b) < 4 {
			err = fmt.Errorf("leaf data is truncated (%s)", what)
			return 0
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		return n
	}
	field := func(what string) []byte {
		n := u32(what)
		if err != nil {
			return nil
		}
		if uint64(len(b)) < uint64(n) {
			err = fmt.Errorf("leaf data is truncated (%s wants %d bytes, %d left)", what, n, len(b))
			return nil
		}
		f := b[:n:n]
		b = b[n:]
		return f
	}
	if tag := field("tag"); err == nil && string(tag) != leafTag {
		return l, fmt.Errorf("leaf data does not start with %q", leafTag)
	}
	l.Key = field("key")
	l.Value = field("value")
	nh := u32("header count")
	for i := uint32(0); i < nh && err == nil; i++ {
		k, v := field("header key"), field("header value")
		l.Headers = append(l.Headers, Header{string(k), string(v)})
	}
	if err != nil {
		return Leaf{}, err
	}
	if len(b) != 0 {
		return Leaf{}, fmt.Errorf("leaf data has %d bytes after its last header", len(b))
	}
	return l, nil
}

// LeafHash is the RFC 6962 leaf hash: SHA-256(0x00 || data).
func LeafHash(data []byte) []byte { return rfc6962.DefaultHasher.HashLeaf(data) }

// RecordLeafData is LeafData of a Kafka record.
func RecordLeafData(r *kgo.Record) []byte {
	hs := make([]Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = Header{h.Key, string(h.Value)}
	}
	return LeafData(r.Key, r.Value, hs)
}

// RecordLeafHash is LeafHash(RecordLeafData(r)) without building the leaf
// data: the hot path hashes every journal record once.
func RecordLeafHash(r *kgo.Record) []byte {
	h := sha256.New()
	var n [4]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	h.Write([]byte{0}) // RFC 6962 leaf prefix
	field([]byte(leafTag))
	field(r.Key)
	field(r.Value)
	binary.BigEndian.PutUint32(n[:], uint32(len(r.Headers)))
	h.Write(n[:])
	for _, hd := range r.Headers {
		field([]byte(hd.Key))
		field(hd.Value)
	}
	return h.Sum(nil)
}
