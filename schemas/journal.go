package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// MarshalRecord encodes a record as the journal value and the outcome
// event's data: its RFC 8785 canonical JSON (appendRecordJSON), hash included as
// rec.Hash says. Strings are not HTML-escaped, so HTML-heavy data or results
// do not grow 6× on their way to the journal (issue 7).
func MarshalRecord(rec Record) ([]byte, error) {
	return appendRecordJSON(nil, &rec)
}

// UnmarshalRecord decodes a record's JSON: records in the shape the
// encoder writes without reflection, anything else with encoding/json.
func UnmarshalRecord(b []byte) (Record, error) {
	var rec Record
	if decodeRecordFast(b, &rec) {
		return rec, nil
	}
	rec = Record{}
	if err := json.Unmarshal(b, &rec); err != nil {
		return Record{}, fmt.Errorf("unmarshal record: %w", err)
	}
	return rec, nil
}

// HashRecord computes the hash rec has in its partition's chain when its
// predecessor's hash is prevHash (docs/events.md#execution-records): "sha256:" + hex SHA-256 of the
// RFC 8785 canonical JSON of rec with prev_hash = prevHash and without its
// hash member. SealRecord computes the same while encoding; RecordHash
// computes it from a record's bytes.
func HashRecord(prevHash string, rec Record) (string, error) {
	rec.PrevHash = prevHash
	if _, err := SealRecord(&rec); err != nil {
		return "", err
	}
	return rec.Hash, nil
}

// LegacyHashRecord is the hash of journals written before records were
// hashed over RFC 8785 (round 1): SHA-256 over a domain tag, the previous
// hash and the record's own canonical form, each length-prefixed. Audit
// accepts it for records that predate the change.
func LegacyHashRecord(prevHash string, rec Record) (string, error) {
	rec.Hash, rec.PrevHash = "", ""
	b, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	canon, err := canonical(b, false)
	if err != nil {
		return "", fmt.Errorf("canonicalize record %q: %w", rec.IdempotencyKey, err)
	}
	h := sha256.New()
	writeFramed(h, []byte("onceflight/record-hash/v1"))
	writeFramed(h, []byte(prevHash))
	writeFramed(h, canon)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
