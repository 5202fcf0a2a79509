package audit

import (
	"bytes"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// outcomeFacts is what the checks read of an outcome event: its id and
// causation, and of its record the key, entity, status, error code,
// command partition and settlement decision. The audit reads every
// outcome, and keeping (and copying) the rest of the record — its data,
// result, evidence, times — is copied and allocated for nothing.
type outcomeFacts struct {
	id, causation string
	key, entity   string
	code          string // the record's error code; "" without an error
	decision      string // wire.SettlementDecision; "" when not a settlement
	status        schemas.Status
	partition     int32  // the record's command partition
	idOK          bool   // id is wire.OutcomeIDOf the record and causation
	wantID        string // that id, when it is not id
}

// factsOf is the facts of outcome event id, answering causation, whose
// data is rec.
func factsOf(id, causation string, rec *schemas.Record) outcomeFacts {
	f := outcomeFacts{id: id, causation: causation, key: rec.IdempotencyKey, entity: rec.Entity,
		decision: wire.SettlementDecision(rec, causation), status: rec.Status, partition: rec.Command.Partition}
	if rec.Error != nil {
		f.code = rec.Error.Code
	}
	if wire.IsOutcomeIDOf(id, rec, causation) {
		f.idOK = true
	} else {
		f.wantID = wire.OutcomeIDOf(rec, causation)
	}
	return f
}

// decodeOutcome is schemas.DecodeOutcome reduced to the facts the checks
// read, with a fast path for the one shape the executor writes
// (wire.EncodeOutcomeData): the CloudEvents sdk's generic reader (validate
// the JSON, build an event, its extensions map, then copy the data out)
// was most of the audit's time. Anything else — another member order, an
// escaped string, binary mode, an error — goes through DecodeOutcome, so
// the result, and every error message, is DecodeOutcome's
// (FuzzDecodeOutcomeFast).
func decodeOutcome(r *kgo.Record, memo *recordMemo, t *memoTag) (f outcomeFacts, fromMemo bool, err error) {
	if f, fromMemo, ok := decodeOutcomeFast(r, memo, t); ok {
		return f, fromMemo, nil
	}
	o, err := schemas.DecodeOutcome(r)
	if err != nil {
		return outcomeFacts{}, false, err
	}
	return factsOf(o.ID, o.CausationID, &o.Record), false, nil
}

// decodeOutcomeFast reads an outcome event of exactly the members, in
// exactly the order, that EncodeOutcomeData writes, with strings free of
// escapes; false for anything else. Its record is read with
// schemas.UnmarshalRecordIndex, which accepts and refuses exactly what
// UnmarshalRecord does but keeps only the fields the index reads; a
// settlement, whose id depends on the command id the index decoder does
// not keep, is decoded whole. A record whose exact bytes are in memo
// (nil: none) is not decoded at all: the memo has the fields of it that
// decoding these bytes gives. *t is where the memo writes the record's
// tag.
func decodeOutcomeFast(r *kgo.Record, memo *recordMemo, t *memoTag) (f outcomeFacts, fromMemo, ok bool) {
	if len(r.Headers) != 1 || r.Headers[0].Key != "content-type" || string(r.Headers[0].Value) != "application/cloudevents+json" {
		return f, false, false
	}
	s := outcomeScanner{b: r.Value}
	var id, source, typ, subject, at, causation []byte
	if !s.opt(`{"specversion":"1.0","id":`) || !s.str(&id) || len(id) == 0 ||
		!s.opt(`,"source":`) || !s.str(&source) || string(source) != schemas.OutcomeSource ||
		!s.opt(`,"type":`) || !s.str(&typ) || !strings.HasPrefix(string(typ), schemas.OutcomeTypePrefix) {
		return f, false, false
	}
	if s.opt(`,"subject":`) && (!s.str(&subject) || len(subject) == 0) {
		return f, false, false
	}
	if !s.opt(`,"datacontenttype":"application/json","time":`) || !s.str(&at) {
		return f, false, false
	}
	if _, err := time.Parse(time.RFC3339Nano, string(at)); err != nil {
		return f, false, false
	}
	if s.opt(`,"`+schemas.ExtCausationID+`":`) && !s.str(&causation) {
		return f, false, false
	}
	var key []byte
	if s.opt(`,"`+schemas.ExtIdempotencyKey+`":`) && !s.str(&key) {
		return f, false, false
	}
	if !s.opt(`,"`+schemas.ExtReplayed+`":true`) && !s.opt(`,"`+schemas.ExtReplayed+`":false`) {
		return f, false, false
	}
	var tp []byte
	if s.opt(`,"`+schemas.ExtTraceParent+`":`) && !s.str(&tp) {
		return f, false, false
	}
	if !s.opt(`,"data":{`) {
		return f, false, false
	}
	data := s.b[s.i-1 : len(s.b)-1]
	if len(data) < 2 || s.b[len(s.b)-1] != '}' || data[len(data)-1] != '}' {
		return f, false, false
	}
	if rec, ok := memo.find(data, t); ok {
		return factsOf(string(id), string(causation), &rec), true, true
	}
	rec, err := schemas.UnmarshalRecordIndex(data)
	if err != nil {
		return f, false, false
	}
	if rec.Resolution != nil {
		if rec, err = schemas.UnmarshalRecord(data); err != nil {
			return f, false, false
		}
	}
	return factsOf(string(id), string(causation), &rec), false, true
}

// outcomeScanner walks an outcome event's bytes.
type outcomeScanner struct {
	b []byte
	i int
}

// opt consumes lit if it comes next (for a member that must come next,
// false means the shape is not the encoder's).
func (s *outcomeScanner) opt(lit string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}

// str reads a JSON string without escapes or control characters, in
// valid UTF-8; dst points into the event's bytes.
func (s *outcomeScanner) str(dst *[]byte) bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[start:j]
			if !utf8.Valid(v) {
				return false
			}
			*dst = v
			s.i = j + 1
			return true
		case c == '\\' || c < 0x20:
			return false
		}
	}
	return false
}
