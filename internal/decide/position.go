package decide

import "github.com/onceflight/onceflight/schemas"

// Position is where a command was consumed: its partition of the commands
// topic and its offset there. Commands of one entity are consumed in
// offset order, so positions order everything that happens to one key.
type Position struct {
	Partition int32
	Offset    int64
}

// At is the position of cmd.
func At(cmd schemas.Command) Position {
	return Position{Partition: cmd.Partition, Offset: cmd.Offset}
}

// Seen is the record of a key as the command at pos sees it: the answer a
// command gets must not depend on whether it is consumed for the first
// time or again after a restart (the committed offset is a low watermark:
// another entity's slow command can hold it below commands that were
// answered long ago, and all of them are consumed again).
//
//   - A release frees the key for the commands after it only. A command
//     at or before the release's position sees the record as it was
//     before the release, so a redelivered command is answered as it was
//     the first time instead of executing again with its old data.
//   - A rejection that is not final for the key (RejectionFinal) decides
//     the answer of the command it rejected only, wherever that command
//     is consumed again; for a later command with the key it is no
//     record (Stripe's rule: no result is saved for a request that never
//     started executing).
//
// found=false means the key is new work for this command.
func Seen(rec schemas.Record, found bool, pos Position) (schemas.Record, bool) {
	rec, found = Named(rec, found, pos)
	if found && retryable(&rec) && rec.Command.Partition == pos.Partition && pos.Offset > rec.Command.Offset {
		return schemas.Record{}, false
	}
	return rec, found
}

// Named is the record of a key as an operator decision at pos that names
// the key sees it: the release rule of Seen only. A rejection that is not
// final for the key is still the key's record for a decision (it can be
// released); it is only for a later command with the key that it is none.
func Named(rec schemas.Record, found bool, pos Position) (schemas.Record, bool) {
	if !found {
		return rec, false
	}
	if rel := rec.Release; rel != nil {
		if rec.Command.Partition == pos.Partition && !rel.After(pos.Offset) {
			rec.Release = nil
			return rec, true
		}
		return schemas.Record{}, false
	}
	return rec, true
}

// retryable reports whether rec is a rejection that leaves the key free
// for a later command: the command never started, and the reason it was
// refused may not hold for a later one (docs/guarantees.md#decision-table).
// An operator's decision (resolve --as rejected) is never retryable.
func retryable(rec *schemas.Record) bool {
	return rec.Status == schemas.StatusRejected && rec.Resolution == nil &&
		rec.Error != nil && !RejectionFinal(rec.Error.Code)
}

// RejectionFinal reports whether a rejection with code answers every
// later command with the same key (true), or only the command it rejected
// (false: the key stays free). Final are the rejections about the key
// itself — it is used by another command, it duplicates another
// execution's business key, it is too old — because a later command with
// the key is the same request again and must get the same answer. The
// others are about the command or the configuration at the time: an
// action not configured yet, a source not allowed yet, data failing a
// schema, a deadline or an expected version, a size limit, a decision
// whose record was not in a status it applies to, or one refused for its
// signature.
func RejectionFinal(code string) bool {
	switch code {
	case schemas.CodeKeyReused, schemas.CodeDuplicateBusinessKey, schemas.CodeKeyExpired:
		return true
	}
	return false
}
