package schemas

import (
	"bytes"
	"net/url"
	"sync/atomic"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/onceflight/onceflight/internal/jcs"
)

// ceAttrs is what DecodeCommand reads from a CloudEvent: from sdk-go's
// event, or from structuredFast without it.
type ceAttrs struct {
	id, source, typ, subject string
	// sdk is the event sdk-go decoded (nil on the fast path); its
	// extensions are read from it.
	sdk *event.Event
	// exts are the fast path's extensions, all strings, by index in
	// fastExts; has says which are present.
	exts [len(fastExts)]string
	has  uint8
	// data is the event's data (spaces trimmed); mediaType the media type
	// of its datacontenttype ("" when absent).
	data      []byte
	mediaType string
	// canon is data's jcs.CanonicalData when the fast path computed it on the
	// way (nil: not computed).
	canon []byte
}

// fastExts are the extensions the fast path reads; any other member sends
// the event to sdk-go.
var fastExts = [...]string{ExtIdempotencyKey, ExtExpectedVersion, ExtDeadline, ExtTraceParent, ExtControlKeyID, ExtControlSig}

// ext returns extension name, as sdk-go's Extensions() would hold it.
func (a *ceAttrs) ext(name string) (any, bool) {
	if a.sdk != nil {
		v, ok := a.sdk.Extensions()[name]
		return v, ok
	}
	for i, n := range fastExts {
		if n == name {
			return a.exts[i], a.has&(1<<i) != 0
		}
	}
	return nil, false
}

// extString is ext for the extensions that must be strings, without
// boxing the fast path's value in an interface (an allocation per
// command): isStr false says a present value is not a string, and v is
// that value, for the error.
func (a *ceAttrs) extString(name string) (s string, present, isStr bool, v any) {
	if a.sdk == nil {
		for i, n := range fastExts {
			if n == name {
				return a.exts[i], a.has&(1<<i) != 0, true, nil
			}
		}
		return "", false, false, nil
	}
	v, present = a.sdk.Extensions()[name]
	s, isStr = v.(string)
	return s, present, isStr, v
}

func attrsOf(ev *event.Event) ceAttrs {
	mt, _ := ev.Context.GetDataMediaType()
	return ceAttrs{id: ev.ID(), source: ev.Source(), typ: ev.Type(), subject: ev.Subject(), sdk: ev,
		data: bytes.TrimSpace(ev.Data()), mediaType: mt}
}

// structuredFast reads a structured-mode command event (the JSON of a
// CloudEvent) without sdk-go, which costs a generic event, a map of
// extensions and a second pass over the data per command: most of a
// command's decoding on the executor's hot path (issue 24).
//
// It answers only for the shape producers write — specversion "1.0"; id,
// source, type and subject non-empty strings; optional time,
// datacontenttype "application/json" and the extensions in fastExts, all
// strings without escapes; data a JSON object; no member twice; nothing
// after the object — and returns ok false for anything else, leaving the
// event to sdk-go, so that its result is sdk-go's wherever it answers
// (FuzzStructuredFastMatchesSDK). The data is canonicalized on the way
// (strict: a duplicate key inside it sends the event to sdk-go too).
func structuredFast(src []byte) (a ceAttrs, ok bool) {
	p := jcs.Parser{Src: src, Mode: jcs.Mode{Strict: true, IJSON: true}}
	p.SkipSpace()
	if p.Pos >= len(src) || src[p.Pos] != '{' {
		return a, false
	}
	p.Pos++
	var seen uint32
	const (
		mSpec = 1 << iota
		mID
		mSource
		mType
		mSubject
		mTime
		mContentType
		mData
		mExt // first extension bit; extension i is mExt << i
	)
	// plainBytes reads a string value that has no escapes and is valid
	// UTF-8, so that it is exactly the bytes between its quotes; plain
	// makes it a string.
	plainBytes := func() ([]byte, bool) {
		if p.Pos >= len(src) || src[p.Pos] != '"' {
			return nil, false
		}
		start := p.Pos
		s, err := p.Str()
		if err != nil || p.Pos-start-2 != len(s) {
			return nil, false
		}
		return s, true
	}
	plain := func() (string, bool) {
		s, ok := plainBytes()
		return string(s), ok
	}
	p.SkipSpace()
	if p.Pos < len(src) && src[p.Pos] == '}' {
		return a, false
	}
	for {
		key, err := p.MemberKey()
		if err != nil {
			return a, false
		}
		var bit uint32
		var ok bool
		switch string(key) {
		case "specversion":
			var v []byte
			v, ok = plainBytes()
			ok = ok && string(v) == event.CloudEventsVersionV1
			bit = mSpec
		case "id":
			a.id, ok = plain()
			bit = mID
		case "source":
			var v []byte
			if v, ok = plainBytes(); ok {
				a.source, ok = lastSource.get(v, sameURI)
			}
			bit = mSource
		case "type":
			var v []byte
			if v, ok = plainBytes(); ok {
				a.typ, ok = lastType.get(v, nil)
			}
			bit = mType
		case "subject":
			a.subject, ok = plain()
			bit = mSubject
		case "time":
			var v string
			if v, ok = plain(); ok {
				_, err := types.ParseTimestamp(v)
				ok = err == nil
			}
			bit = mTime
		case "datacontenttype":
			var v []byte
			v, ok = plainBytes()
			ok = ok && string(v) == jsonMediaType
			a.mediaType = jsonMediaType
			bit = mContentType
		case "data":
			if p.Pos < len(src) && src[p.Pos] == '{' {
				start := p.Pos
				if n, canon := jcs.CanonicalPrefix(src[start:]); canon {
					// Its own v1 form: fingerprinted where it lies,
					// neither copied nor scanned twice.
					p.Pos += n
					a.data, a.canon, ok = src[start:p.Pos], src[start:p.Pos], true
				} else {
					ok = p.Value(0) == nil
					a.data, a.canon = src[start:p.Pos], p.Out
				}
			}
			bit = mData
		default:
			for i, n := range fastExts {
				if string(key) == n {
					a.exts[i], ok = plain()
					a.has |= 1 << i
					bit = mExt << i
				}
			}
		}
		if !ok || seen&bit != 0 {
			return a, false
		}
		seen |= bit
		more, err := p.MemberEnd()
		if err != nil {
			return a, false
		}
		if !more {
			break
		}
	}
	p.SkipSpace()
	if p.Pos != len(src) {
		return a, false
	}
	const required = mSpec | mID | mSource | mType | mSubject
	if seen&required != required || a.id == "" || a.source == "" || a.typ == "" || a.subject == "" {
		return a, false
	}
	return a, true
}

// jsonMediaType is the one datacontenttype the fast path accepts.
const jsonMediaType = "application/json"

// A producer writes the same source and type on every command: the fast
// path keeps the last one of each it read (checked, for the source), and
// a command that has it again shares its string instead of allocating
// one and parsing the source as a URI again. A different value replaces
// it; concurrent decoders only ever swap whole, checked values.
var lastSource, lastType lastString

// lastString is the last accepted value of one attribute.
type lastString struct{ p atomic.Pointer[string] }

// get returns b as a string, the last one when equal, else a new one
// that check (nil: any) accepts, then kept; ok false when check refuses.
func (l *lastString) get(b []byte, check func(string) bool) (string, bool) {
	if last := l.p.Load(); last != nil && *last == string(b) {
		return *last, true
	}
	s := new(string(b))
	if check != nil && !check(*s) {
		return "", false
	}
	l.p.Store(s)
	return *s, true
}

// sameURI reports whether source is a URI reference that sdk-go, which
// keeps the source parsed and prints it again, gives back unchanged.
func sameURI(source string) bool {
	u, err := url.Parse(source)
	return err == nil && u.String() == source
}
