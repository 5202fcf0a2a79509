package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
//
// x, if not nil, gets what outcomes_match reads besides the facts
// (outcomeMatch).
func decodeOutcome(r *kgo.Record, memo *recordMemo, t *memoTag, x *outcomeMatch) (f outcomeFacts, fromMemo bool, err error) {
	if f, fromMemo, ok := decodeOutcomeFast(r, memo, t, x); ok {
		return f, fromMemo, nil
	}
	o, err := schemas.DecodeOutcome(r)
	if err != nil {
		return outcomeFacts{}, false, err
	}
	if x != nil {
		*x = outcomeMatch{attr: attrProblem([]byte(o.Type), []byte(o.Subject), []byte(o.IdempotencyKey), &o.Record), keyPart: -1}
		x.record(&o.Record)
		if x.journaled {
			x.hashOK, x.actual = hashIsOf(&o.Record, outcomeData(r))
		}
	}
	return factsOf(o.ID, o.CausationID, &o.Record), false, nil
}

// outcomeMatch is what outcomes_match reads of an outcome event besides
// its facts: the event's attributes that restate its record, and whether
// the record is a journal record, which by its hash, and whether its
// contents hash to it.
type outcomeMatch struct {
	attr      string // how the event's type, subject or idempotencykey differ from its record; "" when they agree
	hash      digest // hashDigest of the record's hash member
	journaled bool   // the record has a hash member: it claims to be a journal record
	hashOK    bool   // its contents hash to its hash (or its bytes are a journal record's)
	actual    digest // when !hashOK, hashDigest of what its contents hash to
	cmdOff    int64  // the record's command offset, read for a record without a hash only
	keyID     digest // the keyID of the journal record whose bytes it carries (memo), on
	keyPart   int32  // journal partition keyPart; -1: none
}

// record sets what x reads of the outcome's record rec.
func (x *outcomeMatch) record(rec *schemas.Record) {
	x.journaled = rec.Hash != ""
	x.hash = hashDigest(rec.Hash)
	x.cmdOff = rec.Command.Offset
}

// attrProblem says how an outcome event's type, subject and
// idempotencykey (empty when absent) differ from what its record rec
// says, as wire's encoder writes them from it; "" when they agree. A
// consumer routing on the type acts on it, not on the data.
func attrProblem(typ, subject, key []byte, rec *schemas.Record) string {
	var p []string
	if !strings.HasPrefix(string(typ), schemas.OutcomeTypePrefix) || string(typ[len(schemas.OutcomeTypePrefix):]) != string(rec.Status) {
		p = append(p, fmt.Sprintf("type %q, but its record's status is %s", typ, rec.Status))
	}
	if string(subject) != rec.Entity {
		p = append(p, fmt.Sprintf("subject %q, but its record's entity is %q", subject, rec.Entity))
	}
	if string(key) != rec.IdempotencyKey {
		p = append(p, fmt.Sprintf("idempotencykey %q, but its record's key is %q", key, rec.IdempotencyKey))
	}
	return strings.Join(p, "; ")
}

// hashIsOf reports whether the record rec, decoded whole from data,
// hashes to its hash member, as the journal checks verify a journal
// record's (the round-1 hash too); when not, the digest of what it hashes
// to.
func hashIsOf(rec *schemas.Record, data []byte) (bool, digest) {
	if rec.Hash == "" || data == nil {
		return false, digest{}
	}
	h, err := recordHash(rec, data)
	if err == nil && h == rec.Hash {
		return true, digest{}
	}
	if old, err := wire.LegacyHashRecord(rec.PrevHash, *rec); err == nil && old == rec.Hash {
		return true, digest{}
	}
	if h == "" {
		return false, digest{}
	}
	return false, hashDigest(h)
}

// outcomeData is the data of outcome event r, for decodeOutcome's slow
// path: the data member of a structured event, or the value of a binary
// one; nil when there is none.
func outcomeData(r *kgo.Record) []byte {
	for _, h := range r.Headers {
		if h.Key == "content-type" && strings.HasPrefix(string(h.Value), "application/cloudevents+json") {
			var ev struct {
				Data json.RawMessage `json:"data"`
			}
			if json.Unmarshal(r.Value, &ev) != nil {
				return nil
			}
			return ev.Data
		}
	}
	return r.Value
}

// hashDigest is the digest outcomes_match compares a record's hash by:
// the first 16 bytes of a "sha256:" hash, else a digest of the string.
func hashDigest(h string) digest {
	var d digest
	if len(h) == len("sha256:")+64 && h[:7] == "sha256:" {
		if _, err := hex.Decode(d[:], []byte(h[7:7+2*len(d)])); err == nil {
			return d
		}
		d = digest{}
	}
	if h == "" {
		return d
	}
	return digestOf("hash", h)
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
func decodeOutcomeFast(r *kgo.Record, memo *recordMemo, t *memoTag, x *outcomeMatch) (f outcomeFacts, fromMemo, ok bool) {
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
	if e, ok := memo.lookup(data, t); ok {
		rec := e.record()
		if x != nil {
			// The bytes of a journal record: hash_chain checks that
			// its contents hash to its hash.
			*x = outcomeMatch{attr: attrProblem(typ, subject, key, &rec),
				hash: e.hash, journaled: e.hashed, hashOK: e.hashed, keyID: e.keyID, keyPart: e.jpart}
		}
		return factsOf(string(id), string(causation), &rec), true, true
	}
	// With x, the record is read whole: its hash is checked by sealing
	// it again (sealedHash), a fraction of canonicalizing the bytes,
	// and a record without a hash is read for its command offset.
	decodeRec, full := schemas.UnmarshalRecordIndex, false
	if x != nil {
		decodeRec, full = schemas.UnmarshalRecord, true
	}
	rec, err := decodeRec(data)
	if err != nil {
		return f, false, false
	}
	if rec.Resolution != nil && !full {
		if rec, err = schemas.UnmarshalRecord(data); err != nil {
			return f, false, false
		}
	}
	if x != nil {
		*x = outcomeMatch{attr: attrProblem(typ, subject, key, &rec), keyPart: -1}
		x.record(&rec)
		if x.journaled {
			x.hashOK, x.actual = hashIsOf(&rec, data) // x: decoded whole (full)
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
