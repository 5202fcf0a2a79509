package audit

import (
	"bytes"
	"crypto/sha256"
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
	if want := wire.OutcomeIDOf(rec, causation); want != id {
		f.wantID = want
	} else {
		f.idOK = true
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
//
// inMemo says that the record was known's, not decoded.
func decodeOutcome(r *kgo.Record, known *recordMemo) (f outcomeFacts, inMemo bool, err error) {
	if f, inMemo, ok := decodeOutcomeFast(r, known); ok {
		return f, inMemo, nil
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
// not keep, is decoded whole. A record whose bytes known holds (a journal
// record of the partition, decoded already) is not decoded again.
func decodeOutcomeFast(r *kgo.Record, known *recordMemo) (f outcomeFacts, inMemo, ok bool) {
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
	if known != nil && known.cur != nil {
		if rf, ok := known.get(sha256.Sum256(data)); ok {
			return rf.outcome(string(id), string(causation)), true, true
		}
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

// recordFacts is what an outcome's facts need of the record in its data
// (factsOf): the executor publishes a journal record's bytes as the data
// of its outcome, and of every repeat's, so the audit keeps these facts of
// the journal records it has decoded (recordMemo) rather than decoding
// the same bytes again for each outcome.
type recordFacts struct {
	key, entity, code string
	cmdID, decision   string // decision: the resolution's, when settled
	status            schemas.Status
	partition         int32
	settled           bool // the record has a resolution
}

func recordFactsOf(rec *schemas.Record) recordFacts {
	rf := recordFacts{key: rec.IdempotencyKey, entity: rec.Entity, cmdID: rec.Command.ID, status: rec.Status, partition: rec.Command.Partition}
	if rec.Error != nil {
		rf.code = rec.Error.Code
	}
	if rec.Resolution != nil {
		rf.settled, rf.decision = true, rec.Resolution.DecisionID
	}
	return rf
}

// outcome is factsOf(id, causation, rec) for the record rf was taken
// from: rec is rebuilt with the fields factsOf and the wire's outcome id
// read, so that both stay the one definition.
func (rf *recordFacts) outcome(id, causation string) outcomeFacts {
	rec := schemas.Record{IdempotencyKey: rf.key, Entity: rf.entity, Status: rf.status,
		Command: schemas.CommandRef{ID: rf.cmdID, Partition: rf.partition}}
	var res schemas.Resolution
	if rf.settled {
		res.DecisionID = rf.decision
		rec.Resolution = &res
	}
	f := factsOf(id, causation, &rec)
	f.code = rf.code
	return f
}

// recordMemo holds the recordFacts of the journal records decoded last,
// by the SHA-256 of their bytes: an outcome whose data has the same
// digest has the same bytes, which UnmarshalRecord accepted already.
// Bounded: two generations of at most max entries each, the older
// dropped when the newer is full, so it holds the latest max to 2·max
// records whatever the partition's size; an outcome whose record was
// dropped (or is not in the journal read) is decoded as before. Lookups
// may run concurrently with each other, never with add.
type recordMemo struct {
	cur, old map[[sha256.Size]byte]recordFacts
	max      int
}

func newRecordMemo(max int) *recordMemo {
	return &recordMemo{max: max}
}

func (m *recordMemo) add(sum [sha256.Size]byte, rf recordFacts) {
	if m.cur == nil || len(m.cur) >= m.max {
		m.old, m.cur = m.cur, make(map[[sha256.Size]byte]recordFacts, min(m.max, 1024))
	}
	m.cur[sum] = rf
}

func (m *recordMemo) get(sum [sha256.Size]byte) (recordFacts, bool) {
	if rf, ok := m.cur[sum]; ok {
		return rf, true
	}
	rf, ok := m.old[sum]
	return rf, ok
}

// reset drops every entry (the partition the records were on is done).
func (m *recordMemo) reset() { m.cur, m.old = nil, nil }

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
