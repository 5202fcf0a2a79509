package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"

	"github.com/onceflight/onceflight/schemas"
)

// IsSealed reports whether raw is byte for byte what SealRecord writes for
// rec, hash member included; rec.Hash is not read. It is SealRecord and a
// comparison without SealRecord's output: rec's body is encoded into
// scratch (returned, grown if needed, for the next call), hashed, and
// compared with raw around raw's hash member, whose value is compared
// with the body's hash in place. An auditor checking every journal
// record this way allocates nothing per record, where SealRecord made a
// new buffer and spliced the hash member into it (BENCHMARKS.md
// "Round 15 (audit)").
//
// hash is the value of raw's hash member ("sha256:…", in raw) when ok.
func IsSealed(scratch []byte, rec *schemas.Record, raw []byte) (buf, hash []byte, ok bool) {
	body, at, err := appendRecord(scratch[:0], rec, false)
	if err != nil {
		return scratch, nil, false
	}
	const n = len(hashMember) + hashLen + 1
	if len(raw) != len(body)+n || !bytes.Equal(raw[:at], body[:at]) || !bytes.Equal(raw[at+n:], body[at:]) {
		return body, nil, false
	}
	m := raw[at : at+n]
	if string(m[:len(hashMember)+7]) != hashMember+"sha256:" || m[n-1] != '"' {
		return body, nil, false
	}
	sum := sha256.Sum256(body)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	if !bytes.Equal(m[len(hashMember)+7:n-1], h[:]) {
		return body, nil, false
	}
	return body, m[len(hashMember) : n-1], true
}
