package audit

import (
	"bytes"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// decodeOutcome is schemas.DecodeOutcome, with a fast path for the one
// shape the executor writes (wire.EncodeOutcomeData): the audit reads
// every outcome, and the CloudEvents sdk's generic reader (validate the
// JSON, build an event, its extensions map, then copy the data out) was
// most of its time. Anything else — another member order, an escaped
// string, binary mode, an error — goes through DecodeOutcome, so the
// result, and every error message, is DecodeOutcome's
// (FuzzDecodeOutcomeFast).
func decodeOutcome(r *kgo.Record) (schemas.Outcome, error) {
	if o, ok := decodeOutcomeFast(r); ok {
		return o, nil
	}
	return schemas.DecodeOutcome(r)
}

// decodeOutcomeFast reads an outcome event of exactly the members, in
// exactly the order, that EncodeOutcomeData writes, with strings free of
// escapes; false for anything else.
func decodeOutcomeFast(r *kgo.Record) (o schemas.Outcome, ok bool) {
	if len(r.Headers) != 1 || r.Headers[0].Key != "content-type" || string(r.Headers[0].Value) != "application/cloudevents+json" {
		return o, false
	}
	s := outcomeScanner{b: r.Value}
	if !s.opt(`{"specversion":"1.0","id":`) || !s.str(&o.ID) || o.ID == "" ||
		!s.opt(`,"source":`) || !s.str(&o.Source) || o.Source != schemas.OutcomeSource ||
		!s.opt(`,"type":`) || !s.str(&o.Type) || !strings.HasPrefix(o.Type, schemas.OutcomeTypePrefix) {
		return o, false
	}
	if s.opt(`,"subject":`) && (!s.str(&o.Subject) || o.Subject == "") {
		return o, false
	}
	var at string
	if !s.opt(`,"datacontenttype":"application/json","time":`) || !s.str(&at) {
		return o, false
	}
	if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
		return o, false
	}
	if s.opt(`,"`+schemas.ExtCausationID+`":`) && !s.str(&o.CausationID) {
		return o, false
	}
	if s.opt(`,"`+schemas.ExtIdempotencyKey+`":`) && !s.str(&o.IdempotencyKey) {
		return o, false
	}
	switch {
	case s.opt(`,"` + schemas.ExtReplayed + `":true`):
		o.Replayed = true
	case s.opt(`,"` + schemas.ExtReplayed + `":false`):
	default:
		return o, false
	}
	var tp string
	if s.opt(`,"`+schemas.ExtTraceParent+`":`) && !s.str(&tp) {
		return o, false
	}
	if !s.opt(`,"data":{`) {
		return o, false
	}
	data := s.b[s.i-1 : len(s.b)-1]
	if len(data) < 2 || s.b[len(s.b)-1] != '}' || data[len(data)-1] != '}' {
		return o, false
	}
	rec, err := schemas.UnmarshalRecord(data)
	if err != nil {
		return o, false
	}
	o.Record = rec
	return o, true
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
// valid UTF-8.
func (s *outcomeScanner) str(dst *string) bool {
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
			*dst = string(v)
			s.i = j + 1
			return true
		case c == '\\' || c < 0x20:
			return false
		}
	}
	return false
}
