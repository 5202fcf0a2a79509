package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"

	"github.com/onceflight/onceflight/internal/jcs"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// recordHash is wire.RecordHash(raw) for the record rec decoded from
// raw, without canonicalizing raw when it does not need to
// (canonicalHash, then sealedHash).
func recordHash(rec *schemas.Record, raw []byte) (string, error) {
	if h, ok := canonicalHash(raw); ok {
		return h, nil
	}
	if h, ok := sealedHash(rec, raw); ok {
		return h, nil
	}
	return wire.RecordHash(raw)
}

// canonicalHash returns wire.RecordHash(raw) when raw is an object whose
// members are each canonical as jcs.IsCanonical judges them, in strictly
// increasing key order: then raw is its own canonical form, and
// RecordHash's canonical form is raw without its top-level "hash" member,
// hashed here as two pieces of raw. The executor writes every record so
// (unless a string needs an escape), and scanning the bytes once costs a
// fraction of sealing the decoded record again, which sealedHash does to
// prove the same thing. Anything else — whitespace, escapes, fractions,
// keys out of order or repeated — is false (FuzzRecordHash).
func canonicalHash(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '{' {
		return "", false
	}
	pos := 1
	from, to := -1, -1 // the "hash" member, with the comma before it (or after it, when first)
	var prev []byte
	for empty := raw[1] == '}'; !empty; {
		start := pos
		n, ok := jcs.CanonicalPrefix(raw[pos:])
		if !ok || raw[pos] != '"' {
			return "", false
		}
		key := raw[pos+1 : pos+n-1]
		if !utf16Ordered(key) || (prev != nil && bytes.Compare(prev, key) >= 0) {
			return "", false
		}
		prev = key
		pos += n
		if pos >= len(raw) || raw[pos] != ':' {
			return "", false
		}
		pos++
		if n, ok = jcs.CanonicalPrefix(raw[pos:]); !ok {
			return "", false
		}
		pos += n
		if pos >= len(raw) {
			return "", false
		}
		isHash := string(key) == "hash"
		if isHash {
			from, to = start, pos
		}
		if raw[pos] == '}' {
			break
		}
		if raw[pos] != ',' {
			return "", false
		}
		pos++
		if isHash && from == 1 {
			to = pos // the first member: drop the comma after it
		}
	}
	if pos != len(raw)-1 {
		return "", false
	}
	h := sha256.New()
	switch {
	case from < 0:
		h.Write(raw)
	case from == 1:
		h.Write(raw[:1])
		h.Write(raw[to:])
	default:
		h.Write(raw[:from-1]) // the comma before it
		h.Write(raw[to:])
	}
	var sum [sha256.Size]byte
	var out [7 + 2*sha256.Size]byte
	copy(out[:], "sha256:")
	hex.Encode(out[7:], h.Sum(sum[:0]))
	return string(out[:]), true
}

// sealedHash returns the hash of raw, the bytes rec was decoded from,
// when raw is exactly what wire.SealRecord writes for rec: the
// executor writes every record that way, so sealing the decoded record
// again and finding raw's bytes proves that raw is canonical and that its
// hash member is the hash of the rest, which is what RecordHash would
// compute. Re-encoding a decoded record costs a fraction of parsing,
// re-ordering and re-escaping raw, which was the largest single item of
// the audit's CPU. Anything else (another writer's member order,
// whitespace, a changed hash, members the decoder does not know) seals to
// other bytes: false, and recordHash hashes raw as before (FuzzRecordHash).
func sealedHash(rec *schemas.Record, raw []byte) (string, bool) {
	// Nesting deeper than the canonicalizer allows is an error of
	// RecordHash that the data member alone, canonicalized one level
	// higher by SealRecord, may not hit: leave such records, which
	// need hundreds of brackets, to RecordHash.
	if bytes.Count(raw, []byte("{"))+bytes.Count(raw, []byte("[")) >= maxFastNesting {
		return "", false
	}
	re := *rec
	b, err := wire.SealRecord(&re)
	if err != nil || !bytes.Equal(b, raw) {
		return "", false
	}
	return re.Hash, true
}

// utf16Ordered reports whether key has no character from U+E000 up (no
// lead byte 0xEE or above): JCS orders keys by UTF-16 code units, which
// agrees with UTF-8's byte order below that (jcs.IsCanonical's rule).
func utf16Ordered(key []byte) bool {
	for _, ch := range key {
		if ch >= 0xEE {
			return false
		}
	}
	return true
}

// maxFastNesting bounds the brackets of a record sealedHash seals: well
// below the canonicalizer's nesting limit (512), so that a record sealed
// whole can never be one RecordHash refuses as too deep.
const maxFastNesting = 256
