package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/onceflight/onceflight/internal/jcs"
)

// fingerprintDomain separates command fingerprints from any other SHA-256 we
// compute, and lets the scheme be versioned if it ever has to change.
const fingerprintDomain = "onceflight/fingerprint/v1"

func jsonValid(b []byte) bool { return json.Valid(b) }

// Fingerprint is the command fingerprint of docs/events.md#command-events: "sha256:" + hex of
// SHA-256 over type, subject and the canonical JSON of data (jcs.CanonicalData: v1, I-JSON). Each part is
// length-prefixed (8-byte big-endian) after a domain tag, so no two different
// (type, subject, data) triples frame to the same bytes. Absent data (nil or
// empty) frames as zero bytes and so differs from an empty object {}.
func Fingerprint(typ, subject string, data json.RawMessage) (string, error) {
	var canon []byte
	if len(data) > 0 {
		var err error
		if canon, err = jcs.CanonicalData(data); err != nil {
			return "", fmt.Errorf("canonicalize data: %w", err)
		}
	}
	return fingerprintCanonical(typ, subject, canon), nil
}

func fingerprintCanonical(typ, subject string, canon []byte) string {
	// The framed parts are hashed in one piece from a stack buffer: a
	// command's fingerprint is taken on every decode, and sha256.New,
	// the []byte of each part, Sum and the hex string were ~10 heap
	// objects per command. Data past the buffer moves it to the heap.
	var stack [512]byte
	buf := jcs.AppendFramed(stack[:0], fingerprintDomain)
	buf = jcs.AppendFramed(buf, typ)
	buf = jcs.AppendFramed(buf, subject)
	buf = jcs.AppendFramed(buf, canon)
	sum := sha256.Sum256(buf)
	const prefix = "sha256:"
	var out [len(prefix) + 2*sha256.Size]byte
	copy(out[:], prefix)
	hex.Encode(out[len(prefix):], sum[:])
	return string(out[:])
}
