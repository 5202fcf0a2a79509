package schemas

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
)

// maxDepth bounds JSON nesting so hostile input cannot drive deep recursion.
const maxDepth = 512

// fingerprintDomain separates command fingerprints from any other SHA-256 we
// compute, and lets the scheme be versioned if it ever has to change.
const fingerprintDomain = "onceflight/fingerprint/v1"

func jsonValid(b []byte) bool { return json.Valid(b) }

// canonicalJSON returns one canonical text for a JSON value, so that two
// encodings of the same value (key order, whitespace, escapes) hash alike:
// object keys sorted by byte order of their UTF-8, no insignificant
// whitespace, strings re-escaped minimally (only '"', '\\' and control
// characters), numbers kept as their literal text (1.0 and 1 differ: we do
// not guess the sender's numeric semantics). Duplicate object keys are an
// error: which one a consumer would see is ambiguous. Trailing data after the
// value is an error.
func canonicalJSON(raw []byte) ([]byte, error) {
	return canonical(raw, true)
}

// canonical implements canonicalJSON; with strict false a duplicate key keeps
// its last value (encoding/json's rule), for hashing data we did not accept
// ourselves (connector results) where failing is worse than choosing.
func canonical(raw []byte, strict bool) ([]byte, error) {
	return appendCanonical(make([]byte, 0, len(raw)), raw, canonMode{strict: strict})
}

const hexDigits = "0123456789abcdef"

// Fingerprint is the command fingerprint of docs/events.md#command-events: "sha256:" + hex of
// SHA-256 over type, subject and the canonical JSON of data. Each part is
// length-prefixed (8-byte big-endian) after a domain tag, so no two different
// (type, subject, data) triples frame to the same bytes. Absent data (nil or
// empty) frames as zero bytes and so differs from an empty object {}.
func Fingerprint(typ, subject string, data json.RawMessage) (string, error) {
	var canon []byte
	if len(data) > 0 {
		var err error
		if canon, err = canonicalJSON(data); err != nil {
			return "", fmt.Errorf("canonicalize data: %w", err)
		}
	}
	return fingerprintCanonical(typ, subject, canon), nil
}

func fingerprintCanonical(typ, subject string, canon []byte) string {
	h := sha256.New()
	writeFramed(h, []byte(fingerprintDomain))
	writeFramed(h, []byte(typ))
	writeFramed(h, []byte(subject))
	writeFramed(h, canon)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// writeFramed writes len(b) as 8 bytes big-endian, then b.
func writeFramed(w io.Writer, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	w.Write(n[:])
	w.Write(b)
}
