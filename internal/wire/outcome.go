package wire

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// OutcomeIDOf is the id of rec's outcome event answering causationID.
// A settlement — the original command's outcome after an operator's
// decision (resolve, approve) — takes its id from (key, status, decision
// id), so each decision's outcome has an id of its own even when two
// decisions leave the same status, and a republication of it the same id.
// Every other outcome takes (key, status, causation id); a repeat under
// another command id is answered under that id.
func OutcomeIDOf(rec *schemas.Record, causationID string) string {
	var b [schemas.OutcomeIDLen]byte
	return string(appendOutcomeIDOf(b[:0], rec, causationID))
}

// IsOutcomeIDOf reports whether id is OutcomeIDOf(rec, causationID),
// without making that id a string: the audit checks every outcome's id
// this way, and the string was an allocation per outcome.
func IsOutcomeIDOf(id string, rec *schemas.Record, causationID string) bool {
	var b [schemas.OutcomeIDLen]byte
	return string(appendOutcomeIDOf(b[:0], rec, causationID)) == id
}

// appendOutcomeIDOf appends OutcomeIDOf(rec, causationID) to dst.
func appendOutcomeIDOf(dst []byte, rec *schemas.Record, causationID string) []byte {
	if d := SettlementDecision(rec, causationID); d != "" {
		causationID = d
	}
	return schemas.AppendOutcomeID(dst, rec.IdempotencyKey, rec.Status, causationID)
}

// SettlementDecision is the decision id an outcome of rec answering
// causationID takes its id from (OutcomeIDOf), or "" when it is not a
// settlement.
func SettlementDecision(rec *schemas.Record, causationID string) string {
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
//
// The record is written straight into the event's buffer, sized for it
// (sealedSize), not encoded apart and copied: every repeat's answer is
// encoded here, and the second buffer, its growth and the copy were a
// third of that.
func EncodeOutcome(rec schemas.Record, causationID string, replayed bool) (*kgo.Record, error) {
	v := make([]byte, 0, outcomeHeadSize(&rec, causationID)+sealedSize(&rec)+len(`,"hash":`)+len(rec.Hash)+2)
	v = appendOutcomeHead(v, &rec, causationID, replayed)
	v, err := appendRecordJSON(v, &rec)
	if err != nil {
		return nil, err
	}
	return outcomeRecord(&rec, append(v, '}')), nil
}
