package audit

import (
	"encoding/binary"
	"errors"

	"github.com/onceflight/onceflight/schemas"
)

// The encodings of the per-partition state a spill writes out: varints
// and length-prefixed strings, read back by a decoder that refuses a
// short or overlong entry.

// Spill kinds: the first byte of a state entry's key in the store. 0 is
// the outcome ids' (idStore).
const (
	spillKeys byte = iota + 1
	spillEnts
	spillAnswers
	spillCauses
)

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

var errEntry = errors.New("malformed state entry")

type entryReader struct {
	b   []byte
	err error
}

func (r *entryReader) int() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errEntry
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *entryReader) str() string {
	l, n := binary.Uvarint(r.b)
	if n <= 0 || uint64(len(r.b)-n) < l {
		r.err = errEntry
		return ""
	}
	s := string(r.b[n : n+int(l)])
	r.b = r.b[n+int(l):]
	return s
}

func (r *entryReader) bool() bool {
	if len(r.b) == 0 {
		r.err = errEntry
		return false
	}
	v := r.b[0] != 0
	r.b = r.b[1:]
	return v
}

// done is the reader's error, or one if bytes are left over.
func (r *entryReader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = errEntry
	}
	return r.err
}

func encKey(b []byte, ks keyState) []byte {
	f := ks.final
	b = appendStr(b, string(f.status))
	for _, v := range [...]int64{f.off, f.finishedSec, f.freeAfter, f.releaseAt, int64(f.finishedNsec), int64(ks.attempts), ks.attemptsOff} {
		b = binary.AppendVarint(b, v)
	}
	for _, v := range [...]bool{f.hasFinished, f.hasFree, ks.hasFinal, ks.unresolved} {
		b = appendBool(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(ks.pubs)))
	for _, p := range ks.pubs {
		b = append(b, p.hash[:]...)
		b = binary.AppendVarint(b, p.off)
		b = append(b, p.status)
	}
	return b
}

func decKey(b []byte) (keyState, error) {
	r := entryReader{b: b}
	var ks keyState
	f := &ks.final
	f.status = intern(schemas.Status(r.str()))
	f.off, f.finishedSec, f.freeAfter, f.releaseAt = r.int(), r.int(), r.int(), r.int()
	f.finishedNsec = int32(r.int())
	ks.attempts, ks.attemptsOff = int(r.int()), r.int()
	f.hasFinished, f.hasFree, ks.hasFinal, ks.unresolved = r.bool(), r.bool(), r.bool(), r.bool()
	n, w := binary.Uvarint(r.b)
	if w <= 0 || n > uint64(len(r.b)) {
		return ks, errEntry
	}
	r.b = r.b[w:]
	for range n {
		var p pubRec
		if len(r.b) < len(p.hash) {
			return ks, errEntry
		}
		r.b = r.b[copy(p.hash[:], r.b):]
		p.off = r.int()
		if len(r.b) == 0 {
			return ks, errEntry
		}
		p.status, r.b = r.b[0], r.b[1:]
		ks.pubs = append(ks.pubs, p)
	}
	return ks, r.done()
}

func encEnt(b []byte, es entityState) []byte {
	b = binary.AppendUvarint(b, uint64(len(es.inflight)))
	for _, k := range es.inflight {
		b = appendInflight(b, k)
	}
	b = binary.AppendVarint(b, es.tok)
	b = appendStr(b, es.tokKey)
	b = binary.AppendVarint(b, es.tokOff)
	b = appendBool(b, es.inherited != nil)
	if es.inherited != nil {
		b = appendInflight(b, *es.inherited)
	}
	return b
}

func appendInflight(b []byte, k inflightKey) []byte {
	b = appendStr(b, k.key)
	b = binary.AppendVarint(b, k.off)
	b = binary.AppendVarint(b, k.deadline)
	return binary.AppendVarint(b, k.epoch)
}

func (r *entryReader) inflight() inflightKey {
	return inflightKey{key: r.str(), off: r.int(), deadline: r.int(), epoch: r.int()}
}

func decEnt(b []byte) (entityState, error) {
	r := entryReader{b: b}
	var es entityState
	n, w := binary.Uvarint(r.b)
	if w <= 0 || n > uint64(len(b)) {
		return es, errEntry
	}
	r.b = r.b[w:]
	for range n {
		es.inflight = append(es.inflight, r.inflight())
	}
	es.tok, es.tokKey, es.tokOff = r.int(), r.str(), r.int()
	if r.bool() {
		h := r.inflight()
		es.inherited = &h
	}
	return es, r.done()
}

func encAnswer(b []byte, a answer) []byte {
	b = appendStr(b, string(a.status))
	b = appendStr(b, a.code)
	b = binary.AppendVarint(b, int64(a.at.p))
	return binary.AppendVarint(b, a.at.off)
}

func decAnswer(b []byte) (answer, error) {
	r := entryReader{b: b}
	a := answer{status: intern(schemas.Status(r.str())), code: r.str()}
	a.at.p, a.at.off = int32(r.int()), r.int()
	return a, r.done()
}

func encCause(b []byte, f uint8) []byte { return append(b, f) }

func decCause(b []byte) (uint8, error) {
	if len(b) != 1 {
		return 0, errEntry
	}
	return b[0], nil
}
