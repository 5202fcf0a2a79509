package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/jcs"
	"github.com/onceflight/onceflight/schemas"
)

// EpochMarker is written to a journal partition by each new owner before it
// processes the partition (docs/guarantees.md#g1-single-flight): its epoch,
// the executor, and the partition count it works with, so that a restore
// after the topics grew can tell that entities moved.
type EpochMarker struct {
	Epoch      int64  `json:"epoch"`
	Executor   string `json:"executor"`
	Partitions int    `json:"partitions,omitempty"`
}

// EncodeEpochMarker is a marker's journal value.
func EncodeEpochMarker(m EpochMarker) []byte {
	b, _ := json.Marshal(m) // cannot fail: strings and integers
	return b
}

// JournalKind is a journal record's kind header ("" if none).
func JournalKind(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderKind {
			return string(h.Value)
		}
	}
	return ""
}

// DecodeEpochMarker reads a marker: its JSON value, or — for a value that
// does not decode or names no epoch — the epoch header alone.
func DecodeEpochMarker(r *kgo.Record) EpochMarker {
	var m EpochMarker
	if err := json.Unmarshal(r.Value, &m); err == nil && m.Epoch > 0 {
		return m
	}
	m = EpochMarker{}
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderEpoch {
			m.Epoch, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	return m
}

// LegacyHashRecord is the hash of journals written before records were
// hashed over RFC 8785 (round 1): SHA-256 over a domain tag, the previous
// hash and the record's own canonical form, each length-prefixed. Audit
// accepts it for records that predate the change.
func LegacyHashRecord(prevHash string, rec schemas.Record) (string, error) {
	rec.Hash, rec.PrevHash = "", ""
	b, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	canon, err := jcs.CanonicalV1(b, false)
	if err != nil {
		return "", fmt.Errorf("canonicalize record %q: %w", rec.IdempotencyKey, err)
	}
	h := sha256.New()
	jcs.WriteFramed(h, []byte("onceflight/record-hash/v1"))
	jcs.WriteFramed(h, []byte(prevHash))
	jcs.WriteFramed(h, canon)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
