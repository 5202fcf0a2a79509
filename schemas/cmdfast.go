package schemas

import (
	"bytes"
	"net/url"

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
	// canon is data's jcs.CanonicalV1 (strict) when the fast path computed it on the
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
	p := jcs.Parser{Src: src, Mode: jcs.Mode{Strict: true}}
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
	// plain reads a string value that has no escapes and is valid UTF-8,
	// so that it is exactly the bytes between its quotes.
	plain := func() (string, bool) {
		if p.Pos >= len(src) || src[p.Pos] != '"' {
			return "", false
		}
		start := p.Pos
		s, err := p.Str()
		if err != nil || p.Pos-start-2 != len(s) {
			return "", false
		}
		return string(s), true
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
			var v string
			v, ok = plain()
			ok = ok && v == event.CloudEventsVersionV1
			bit = mSpec
		case "id":
			a.id, ok = plain()
			bit = mID
		case "source":
			a.source, ok = plain()
			// sdk-go keeps the source as a parsed URI and prints it
			// again: answer only where that is the same string.
			if ok {
				u, err := url.Parse(a.source)
				ok = err == nil && u.String() == a.source
			}
			bit = mSource
		case "type":
			a.typ, ok = plain()
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
			var v string
			v, ok = plain()
			ok = ok && v == "application/json"
			a.mediaType = v
			bit = mContentType
		case "data":
			if p.Pos < len(src) && src[p.Pos] == '{' {
				start := p.Pos
				ok = p.Value(0) == nil
				a.data, a.canon = src[start:p.Pos], p.Out
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
