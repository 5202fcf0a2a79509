package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/twmb/franz-go/pkg/kgo"
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
	h := sha256.New()
	writeFramed(h, []byte("onceflight/outcome-id/v1"))
	writeFramed(h, []byte(key))
	writeFramed(h, []byte(status))
	writeFramed(h, []byte(commandID))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// OutcomeIDOf is the id of rec's outcome event answering causationID.
// A settlement — the original command's outcome after an operator's
// decision (resolve, approve) — takes its id from (key, status, decision
// id), so each decision's outcome has an id of its own even when two
// decisions leave the same status, and a republication of it the same id.
// Every other outcome takes (key, status, causation id); a repeat under
// another command id is answered under that id.
func OutcomeIDOf(rec *Record, causationID string) string {
	if d := SettlementDecision(rec, causationID); d != "" {
		return OutcomeID(rec.IdempotencyKey, rec.Status, d)
	}
	return OutcomeID(rec.IdempotencyKey, rec.Status, causationID)
}

// SettlementDecision is the decision id an outcome of rec answering
// causationID takes its id from (OutcomeIDOf), or "" when it is not a
// settlement.
func SettlementDecision(rec *Record, causationID string) string {
	if r := rec.Resolution; r != nil && causationID == rec.Command.ID {
		return r.DecisionID
	}
	return ""
}

// EncodeOutcome encodes rec as its outcome event in structured mode (value =
// the whole CloudEvent JSON, data = the record inline). Kafka key and subject
// are rec.Entity; time is rec.FinishedAt, or now for records without one.
// causationID is the id of the command being answered; idempotencykey and
// causationid are omitted when empty (an undecodable command may have
// neither). Topic is left empty.
func EncodeOutcome(rec Record, causationID string, replayed bool) (*kgo.Record, error) {
	data, err := appendRecordJSON(nil, &rec)
	if err != nil {
		return nil, err
	}
	return EncodeOutcomeData(&rec, data, causationID, replayed), nil
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
