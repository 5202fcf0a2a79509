package consumer

import (
	"encoding/json"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// Every record the executor writes must fit max.message.bytes, which it
// sets on the topics it creates and checks on the ones it finds (topics.go):
// a record over it fails the whole transaction, and one transaction carries
// every partition's work. So sizes are settled before anything is queued:
//
//   - command data is bounded by MaxDataBytes, validated to leave room in
//     a record for everything else (an intent always fits);
//   - a final record that would not fit drops the command data (the
//     command keeps it at its offset, and only an in_progress record's
//     data is ever used again), then its result (replaced by a marker),
//     then most of its error message;
//   - a deadletter or forward whose copy would not fit is written by
//     reference (outbox), and a forward that cannot be copied is answered
//     too_large.

// recordOverhead is room for everything in a journal record or outcome
// event besides data, result and error message: fixed fields, hashes,
// CloudEvents envelope, headers, batch framing.
const recordOverhead = 16 << 10

// fits reports whether rec's journal record and outcome event fit.
func (e *Executor) fits(rec *schemas.Record) bool {
	msg := 0
	if rec.Error != nil {
		msg = len(rec.Error.Message)
	}
	// The evidence (bounded: wire.MaxEvidence entries with bounded
	// details) is text the external system wrote: counted like the error
	// message, plus each entry's fixed fields.
	for _, ev := range rec.Evidence {
		msg += len(ev.Detail) + len(ev.By) + len(ev.Answer) + 256/6
	}
	// JSON escaping can grow a string up to 6×; data and result are raw
	// JSON, written as they are.
	if len(rec.Data)+len(rec.Result)+6*msg+recordOverhead <= e.cfg.MaxMessageBytes {
		return true
	}
	b, err := wire.MarshalRecord(*rec)
	return err == nil && len(b)+recordOverhead <= e.cfg.MaxMessageBytes
}

// fit shrinks rec until it fits (see above); it reports whether it had to.
func (e *Executor) fit(rec *schemas.Record) bool {
	if e.fits(rec) {
		return false
	}
	e.m.tooLarge.Inc()
	e.log.Warn("record over max.message.bytes shrunk", "key", rec.IdempotencyKey, "entity", rec.Entity,
		"status", rec.Status, "data_bytes", len(rec.Data), "result_bytes", len(rec.Result), "max_message_bytes", e.cfg.MaxMessageBytes)
	if rec.Status != schemas.StatusInProgress && len(rec.Data) > 0 {
		rec.Data = nil
		if e.fits(rec) {
			return true
		}
	}
	if len(rec.Result) > 0 {
		rec.Result, _ = json.Marshal(map[string]any{"truncated": true, "bytes": len(rec.Result),
			"reason": "result over max.message.bytes"})
		if e.fits(rec) {
			return true
		}
	}
	if rec.Error != nil && len(rec.Error.Message) > 1024 {
		rec.Error.Message = rec.Error.Message[:1024] + " …[truncated]"
		if e.fits(rec) {
			return true
		}
	}
	// Last, the evidence's details (the classes, times and tokens stay).
	for i := range rec.Evidence {
		rec.Evidence[i].Detail = ""
	}
	return true
}
