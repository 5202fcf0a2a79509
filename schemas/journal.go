package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// MarshalRecord encodes a record as plain JSON: the journal value and the
// outcome event's data.
//
// It does not HTML-escape: json.Marshal writes each '<', '>' and '&' as a
// six-byte \u escape, so HTML-heavy data or results would grow up to 6× on
// their way to the journal and overflow the topic's max.message.bytes (issue 7).
// The output is still valid JSON with the same meaning, and HashRecord hashes
// the canonical form, which is the same either way.
func MarshalRecord(rec Record) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, fmt.Errorf("marshal record %q: %w", rec.IdempotencyKey, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalRecord decodes MarshalRecord's output.
func UnmarshalRecord(b []byte) (Record, error) {
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return Record{}, fmt.Errorf("unmarshal record: %w", err)
	}
	return rec, nil
}

// HashRecord computes rec's hash in the per-partition chain (SPEC §3):
//
//	"sha256:" + hex(SHA-256( frame("onceflight/record-hash/v1")
//	                         || frame(prevHash)
//	                         || frame(canonical JSON of rec with hash and prev_hash set to "") ))
//
// where frame(b) is len(b) as 8 bytes big-endian followed by b, and canonical
// JSON is CanonicalJSON's (sorted keys, no whitespace, numbers as written),
// except that a duplicate key inside result or data keeps its last value. An
// auditor recomputes it from the journal's JSON alone: clear "hash" and
// "prev_hash", canonicalize, hash with the previous record's "hash" (the first
// record of a partition uses prev_hash ""), and compare.
func HashRecord(prevHash string, rec Record) (string, error) {
	rec.Hash, rec.PrevHash = "", ""
	b, err := MarshalRecord(rec)
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
