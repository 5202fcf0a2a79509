package schemas

import (
	"encoding/json"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Journal record headers. The journal carries execution records and, beside
// them, the executor's own markers; readers skip any kind they do not know,
// so new marker kinds can be added without breaking restore or audit.
const (
	HeaderKind = "onceflight-kind"
	KindRecord = "record"
	KindEpoch  = "epoch"
	// KindSeal is an executor's signature over its transaction's records
	// on the partition (trust.Seal, docs/trust.md#signed-transactions).
	KindSeal    = "seal"
	HeaderEpoch = "onceflight-epoch"
)

// Headers of a command the executor forwarded to its entity's partition
// (it had landed on another): where it first landed, so that the audit
// pairs the copy with the original and answers are traced to both.
const (
	HeaderForwardedFromPartition = "onceflight-forwarded-from-partition"
	HeaderForwardedFromOffset    = "onceflight-forwarded-from-offset"
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
		if h.Key == HeaderKind {
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
		if h.Key == HeaderEpoch {
			m.Epoch, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	return m
}
