package schemas

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unsafe"

	"github.com/onceflight/onceflight/internal/jcs"
)

// decodeRecordFast decodes the JSON of a record without reflection: the
// executor reads a record on every repeat, every journal entry at restore,
// and the previous version of every record it writes.
//
// It returns false, leaving the caller to use encoding/json, for anything
// outside the shapes the encoder writes (an unknown or differently-cased
// key, a duplicate key, a non-integer number, a type mismatch), so its
// result is json.Unmarshal's wherever it answers (FuzzDecodeRecordFast).
func decodeRecordFast(src []byte, rec *Record) bool {
	d := recDecoder{p: jcs.Parser{Src: src}}
	return d.record(rec) && d.end()
}

type recDecoder struct {
	p jcs.Parser
	// index: fields the dedupe index does not read (IndexFields) are
	// checked exactly as in a whole decode but not kept, so nothing is
	// copied or allocated for them (UnmarshalRecordIndex).
	index bool
	// keep: Src belongs to the record from now on (UnmarshalRecordKeep),
	// so its strings, data and result point into it instead of being
	// copied out of it one by one.
	keep bool
	// times backs the record's time pointers (started_at, finished_at,
	// deadline, evidence's ended_at): one heap object for up to four of
	// them instead of one each. A record with evidence takes them and
	// its first entry (evRoom) from one recSlab: one object where they
	// were two.
	times  []time.Time
	evRoom []Evidence
}

// recSlab is the room a record's decode takes its times and its first
// evidence entry from (a repeat's record has four times and one entry).
type recSlab struct {
	times [4]time.Time
	ev    [1]Evidence
}

// slab gives d a recSlab's room.
func (d *recDecoder) slab() {
	s := new(recSlab)
	d.times, d.evRoom = s.times[:0:len(s.times)], s.ev[:0:len(s.ev)]
}

// text is b as a string: b itself when the decoder keeps its source (b
// is a piece of Src, or a buffer of its own that the parser unescaped
// into; neither is written again), else a copy.
func (d *recDecoder) text(b []byte) string {
	if d.keep {
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	return string(b)
}

func (d *recDecoder) end() bool {
	d.p.SkipSpace()
	return d.p.Pos == len(d.p.Src)
}

// object walks the members of an object, calling member for each key;
// member reads the value. seen catches duplicates among the first 64 keys
// member reports (by index).
func (d *recDecoder) object(member func(key []byte) (idx int, ok bool)) bool {
	p := &d.p
	p.SkipSpace()
	if p.Pos >= len(p.Src) || p.Src[p.Pos] != '{' {
		return false
	}
	p.Pos++
	var seen uint64
	p.SkipSpace()
	if p.Pos < len(p.Src) && p.Src[p.Pos] == '}' {
		p.Pos++
		return true
	}
	for {
		key, err := p.MemberKey()
		if err != nil {
			return false
		}
		idx, ok := member(key)
		if !ok || seen&(1<<idx) != 0 {
			return false
		}
		seen |= 1 << idx
		more, err := p.MemberEnd()
		if err != nil {
			return false
		}
		if !more {
			return true
		}
	}
}

func (d *recDecoder) isNull() bool {
	p := &d.p
	if i := p.Pos; i+4 <= len(p.Src) && p.Src[i] == 'n' && p.Src[i+1] == 'u' && p.Src[i+2] == 'l' && p.Src[i+3] == 'l' {
		p.Pos += 4
		return true
	}
	return false
}

// str reads a string; null leaves *s as it is (encoding/json's rule).
func (d *recDecoder) str(s *string) bool {
	if d.isNull() {
		return true
	}
	if d.p.Pos >= len(d.p.Src) || d.p.Src[d.p.Pos] != '"' {
		return false
	}
	b, err := d.p.Str()
	if err != nil {
		return false
	}
	*s = d.text(b)
	return true
}

// opt is str for a field outside IndexFields: checked, and in index mode
// not kept.
func (d *recDecoder) opt(s *string) bool {
	if !d.index {
		return d.str(s)
	}
	if d.isNull() {
		return true
	}
	if d.p.Pos >= len(d.p.Src) || d.p.Src[d.p.Pos] != '"' {
		return false
	}
	_, err := d.p.Str()
	return err == nil
}

func (d *recDecoder) int64(v *int64) bool {
	if d.isNull() {
		return true
	}
	p := &d.p
	start := p.Pos
	neg := p.Pos < len(p.Src) && p.Src[p.Pos] == '-'
	if neg {
		p.Pos++
	}
	digits := p.Pos
	var u uint64
	for p.Pos < len(p.Src) && p.Src[p.Pos] >= '0' && p.Src[p.Pos] <= '9' {
		u = u*10 + uint64(p.Src[p.Pos]-'0') // wraps past 19 digits: not used then
		p.Pos++
	}
	if p.Pos < len(p.Src) && (p.Src[p.Pos] == '.' || p.Src[p.Pos] == 'e' || p.Src[p.Pos] == 'E') {
		return false
	}
	nd := p.Pos - digits
	if nd == 0 || (p.Src[digits] == '0' && nd > 1) {
		// No digits, or a leading zero (JSON has neither).
		return false
	}
	if nd <= 18 {
		// Below 10^18: no int64 overflows.
		n := int64(u)
		if neg {
			n = -n
		}
		*v = n
		return true
	}
	n, err := strconv.ParseInt(string(p.Src[start:p.Pos]), 10, 64)
	if err != nil {
		return false
	}
	*v = n
	return true
}

func (d *recDecoder) int(v *int) bool {
	n := int64(*v)
	if !d.int64(&n) {
		return false
	}
	*v = int(n)
	return true
}

func (d *recDecoder) int32(v *int32) bool {
	n := int64(*v)
	if !d.int64(&n) || n != int64(int32(n)) {
		return false
	}
	*v = int32(n)
	return true
}

// raw reads any JSON value and keeps its bytes, as json.RawMessage does
// (null included): a copy, or with keep the piece of Src itself, capped so
// that an append to it cannot write into the rest of Src. The value is
// checked with skip, not with the parser's Value: that wrote the value's
// canonical form, which nothing read (a buffer and a copy per record).
func (d *recDecoder) raw(v *json.RawMessage) bool {
	p := &d.p
	start := p.Pos
	if !d.skip(1) {
		return false
	}
	switch {
	case d.index:
	case d.keep:
		*v = json.RawMessage(p.Src[start:p.Pos:p.Pos])
	default:
		*v = append(json.RawMessage(nil), p.Src[start:p.Pos]...)
	}
	return true
}

// skip reads past one JSON value that is not kept, checking that it is
// well-formed JSON (what json.RawMessage requires), without writing its
// canonical form as Value does: for an index decode's result and data,
// that copy was a tenth of the decode. It may refuse what Value accepts
// (nesting past 64 levels), never the reverse of what encoding/json
// accepts: a refusal only sends the caller to the whole decode.
func (d *recDecoder) skip(depth int) bool {
	p := &d.p
	if depth > 64 || p.Pos >= len(p.Src) {
		return false
	}
	switch c := p.Src[p.Pos]; {
	case c == '"':
		_, err := p.Str()
		return err == nil
	case c == '{', c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		p.Pos++
		p.SkipSpace()
		if p.Pos < len(p.Src) && p.Src[p.Pos] == end {
			p.Pos++
			return true
		}
		for {
			if c == '{' {
				if _, err := p.MemberKey(); err != nil {
					return false
				}
			}
			if !d.skip(depth + 1) {
				return false
			}
			more, err := p.ElemEnd(end)
			if err != nil || !more {
				return err == nil
			}
			p.SkipSpace()
		}
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	}
	_, _, err := d.p.ScanNumber()
	return err == nil
}

func (d *recDecoder) literal(lit string) bool {
	if !bytes.HasPrefix(d.p.Src[d.p.Pos:], []byte(lit)) {
		return false
	}
	d.p.Pos += len(lit)
	return true
}

// timePtr reads an RFC 3339 time or null (nil).
func (d *recDecoder) timePtr(t **time.Time) bool {
	if d.isNull() {
		*t = nil
		return true
	}
	var v time.Time
	if !d.time(&v) {
		return false
	}
	if len(d.times) == cap(d.times) {
		d.times = make([]time.Time, 0, 4)
	}
	d.times = append(d.times, v)
	*t = &d.times[len(d.times)-1]
	return true
}

// optTime is timePtr for a field outside IndexFields: parsed (a bad time
// fails the decode either way), and in index mode not kept.
func (d *recDecoder) optTime(t **time.Time) bool {
	if !d.index {
		return d.timePtr(t)
	}
	if d.isNull() {
		return true
	}
	var v time.Time
	return d.time(&v)
}

func (d *recDecoder) time(t *time.Time) bool {
	if d.isNull() {
		return true
	}
	p := &d.p
	if v, n, ok := parseTimeZ(p.Src[p.Pos:]); ok {
		*t = v
		p.Pos += n
		return true
	}
	start := p.Pos
	if p.Pos >= len(p.Src) || p.Src[p.Pos] != '"' {
		return false
	}
	if _, err := p.Str(); err != nil {
		return false
	}
	return t.UnmarshalJSON(p.Src[start:p.Pos]) == nil
}

func (d *recDecoder) record(rec *Record) bool {
	return d.object(func(key []byte) (int, bool) {
		switch string(key) {
		case "idempotency_key":
			return 0, d.str(&rec.IdempotencyKey)
		case "entity":
			return 1, d.str(&rec.Entity)
		case "action":
			return 2, d.str(&rec.Action)
		case "status":
			return 3, d.status(&rec.Status)
		case "fingerprint":
			return 4, d.opt(&rec.Fingerprint)
		case "attempts":
			return 5, d.int(&rec.Attempts)
		case "entity_version":
			return 6, d.int64(&rec.EntityVersion)
		case "result":
			return 7, d.raw(&rec.Result)
		case "error":
			if d.isNull() {
				rec.Error = nil
				return 8, true
			}
			e := &Error{}
			rec.Error = e
			return 8, d.object(func(k []byte) (int, bool) {
				switch string(k) {
				case "code":
					return 0, d.str(&e.Code)
				case "message":
					return 1, d.str(&e.Message)
				}
				return 0, false
			})
		case "command":
			c := &rec.Command
			return 9, d.object(func(k []byte) (int, bool) {
				switch string(k) {
				case "id":
					return 0, d.opt(&c.ID)
				case "source":
					return 1, d.opt(&c.Source)
				case "partition":
					return 2, d.int32(&c.Partition)
				case "offset":
					return 3, d.int64(&c.Offset)
				}
				return 0, false
			})
		case "started_at":
			return 10, d.optTime(&rec.StartedAt)
		case "finished_at":
			return 11, d.timePtr(&rec.FinishedAt)
		case "executor":
			return 12, d.opt(&rec.Executor)
		case "epoch":
			return 13, d.int64(&rec.Epoch)
		case "fencing_token":
			return 14, d.int64(&rec.FencingToken)
		case "deadline":
			return 15, d.optTime(&rec.Deadline)
		case "traceparent":
			return 16, d.opt(&rec.TraceParent)
		case "data":
			return 17, d.raw(&rec.Data)
		case "resolution":
			return 18, d.resolution(&rec.Resolution)
		case "release":
			return 21, d.resolution(&rec.Release)
		case "unique_key":
			return 22, d.str(&rec.UniqueKey)
		case "established_by":
			return 23, d.opt(&rec.EstablishedBy)
		case "evidence":
			return 24, d.evidence(&rec.Evidence)
		case "evidence_dropped":
			return 25, d.int(&rec.EvidenceDropped)
		case "hash":
			return 19, d.str(&rec.Hash)
		case "prev_hash":
			return 20, d.opt(&rec.PrevHash)
		}
		return 0, false
	})
}

// evidence reads the evidence array, or null (nil).
func (d *recDecoder) evidence(dst *[]Evidence) bool {
	if d.isNull() {
		*dst = nil
		return true
	}
	p := &d.p
	if p.Pos >= len(p.Src) || p.Src[p.Pos] != '[' {
		return false
	}
	p.Pos++
	out := []Evidence{}
	p.SkipSpace()
	if p.Pos < len(p.Src) && p.Src[p.Pos] == ']' {
		p.Pos++
		*dst = out
		return true
	}
	for {
		if !d.index && cap(out) == 0 && len(d.times) == 0 {
			// The first entry, before any time was kept (the encoder's
			// order: a final record has no deadline): in a slab's
			// room, capped at one so that an append after it moves the
			// array out; its ended_at and the record's finished_at and
			// started_at go into the slab's times.
			d.slab()
			out = d.evRoom
		}
		var ev Evidence
		if !d.evidenceEntry(&ev) {
			return false
		}
		if !d.index {
			out = append(out, ev)
		}
		more, err := p.ElemEnd(']')
		if err != nil {
			return false
		}
		if !more {
			*dst = out
			return true
		}
		p.SkipSpace()
	}
}

func (d *recDecoder) evidenceEntry(ev *Evidence) bool {
	return d.object(func(k []byte) (int, bool) {
		switch string(k) {
		case "kind":
			return 0, d.opt(&ev.Kind)
		case "attempt":
			return 1, d.int(&ev.Attempt)
		case "fencing_token":
			return 2, d.int64(&ev.FencingToken)
		case "at":
			return 3, d.time(&ev.At)
		case "ended_at":
			return 4, d.optTime(&ev.EndedAt)
		case "answer":
			return 5, d.opt(&ev.Answer)
		case "by":
			return 6, d.opt(&ev.By)
		case "detail":
			return 7, d.opt(&ev.Detail)
		}
		return 0, false
	})
}

// resolution reads an operator decision (resolution or release), or null.
func (d *recDecoder) resolution(dst **Resolution) bool {
	if d.isNull() {
		*dst = nil
		return true
	}
	r := &Resolution{}
	*dst = r
	return d.object(func(k []byte) (int, bool) {
		switch string(k) {
		case "by":
			return 0, d.str(&r.By)
		case "at":
			return 1, d.time(&r.At)
		case "reason":
			return 2, d.str(&r.Reason)
		case "as":
			return 3, d.status(&r.As)
		case "decision_id":
			return 4, d.str(&r.DecisionID)
		case "offset":
			if d.isNull() {
				return 5, true
			}
			var off int64
			r.Offset = &off
			return 5, d.int64(&off)
		}
		return 0, false
	})
}

// status reads a status string.
func (d *recDecoder) status(dst *Status) bool {
	s := string(*dst)
	ok := d.str(&s)
	*dst = Status(s)
	return ok
}
