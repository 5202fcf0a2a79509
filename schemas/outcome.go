package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/jcs"
)

// OutcomeSource is the CloudEvents source of every outcome event.
const OutcomeSource = "onceflight"

// OutcomeTypePrefix + status is an outcome event's type (docs/events.md#execution-records).
const OutcomeTypePrefix = "onceflight.execution."

// Outcome is a decoded outcome event.
type Outcome struct {
	ID, Type, Source, Subject, IdempotencyKey, CausationID string
	Replayed                                               bool
	Record                                                 Record
}

// OutcomeID is the deterministic id of the outcome for (idempotency key,
// status, command id): a republication after a crash carries the same id so
// consumers can drop it (docs/events.md#execution-records). It is SHA-256 over the three parts, each
// length-prefixed, formatted as an RFC 9562 version 8 (custom) UUID.
func OutcomeID(key string, status Status, commandID string) string {
	var b [OutcomeIDLen]byte
	return string(AppendOutcomeID(b[:0], key, status, commandID))
}

// OutcomeIDLen is the length of an outcome id: a UUID's 36 characters.
const OutcomeIDLen = 36

// AppendOutcomeID appends OutcomeID(key, status, commandID) to dst: an
// outcome event is written with its id in place, without the string
// (a heap object per outcome).
func AppendOutcomeID(dst []byte, key string, status Status, commandID string) []byte {
	// Hashed in one piece from a stack buffer, as fingerprintCanonical:
	// no heap object for the hash's input.
	var stack [256]byte
	buf := jcs.AppendFramed(stack[:0], "onceflight/outcome-id/v1")
	buf = jcs.AppendFramed(buf, key)
	buf = jcs.AppendFramed(buf, status)
	buf = jcs.AppendFramed(buf, commandID)
	sum := sha256.Sum256(buf)
	var u [16]byte
	copy(u[:], sum[:])
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var b [OutcomeIDLen]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return append(dst, b[:]...)
}

// DecodeOutcome decodes an outcome event in either content mode.
func DecodeOutcome(r *kgo.Record) (Outcome, error) {
	if r == nil {
		return Outcome{}, errors.New("decode outcome: nil record")
	}
	ev, err := toEvent(r)
	if err != nil {
		return Outcome{}, fmt.Errorf("decode outcome: %w", err)
	}
	if !strings.HasPrefix(ev.Type(), OutcomeTypePrefix) {
		return Outcome{}, fmt.Errorf("decode outcome: type %q is not an outcome", ev.Type())
	}
	o := Outcome{ID: ev.ID(), Type: ev.Type(), Source: ev.Source(), Subject: ev.Subject()}
	exts := ev.Extensions()
	if o.IdempotencyKey, err = stringExt(exts, ExtIdempotencyKey); err != nil {
		return Outcome{}, err
	}
	if o.CausationID, err = stringExt(exts, ExtCausationID); err != nil {
		return Outcome{}, err
	}
	if v, ok := exts[ExtReplayed]; ok {
		// A bool in JSON; a "true"/"false" string in binary headers.
		if o.Replayed, err = types.ToBool(v); err != nil {
			return Outcome{}, fmt.Errorf("decode outcome: extension %q: %w", ExtReplayed, err)
		}
	}
	if len(ev.Data()) == 0 {
		return Outcome{}, errors.New("decode outcome: no data")
	}
	if o.Record, err = UnmarshalRecord(ev.Data()); err != nil {
		return Outcome{}, fmt.Errorf("decode outcome: %w", err)
	}
	return o, nil
}

func stringExt(exts map[string]any, name string) (string, error) {
	v, ok := exts[name]
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("extension %q must be a string, got %T", name, v)
	}
	return s, nil
}
