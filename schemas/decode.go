package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	jsoniter "github.com/json-iterator/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/jcs"
)

// DefaultMaxDataBytes is the data size limit when none is configured (docs/events.md#command-events).
const DefaultMaxDataBytes = 512 << 10

// Extension attribute names (docs/events.md#command-events, docs/events.md#execution-records). CloudEvents extension names are
// lowercase alphanumeric, hence no separators.
const (
	ExtIdempotencyKey  = "idempotencykey"
	ExtExpectedVersion = "expectedversion"
	ExtDeadline        = "deadline"
	ExtTraceParent     = "traceparent"
	// ExtControlKeyID and ExtControlSig carry an operator decision's
	// signature (docs/guarantees.md, control.go).
	ExtControlKeyID = "onceflightkeyid"
	ExtControlSig   = "onceflightsig"
	ExtCausationID  = "causationid"
	ExtReplayed     = "replayed"
)

// maxIdempotencyKeyBytes bounds an idempotency key (docs/events.md#command-events).
const maxIdempotencyKeyBytes = 256

// DecodeError says why a record is not a valid command. The executor
// deadletters the record with Reason and, when Entity is known, publishes a
// rejected outcome for that entity (docs/events.md#execution-records).
type DecodeError struct {
	Reason string // what is wrong, for humans and the deadletter header
	Entity string // subject, else the record key; empty when neither is known
}

func (e *DecodeError) Error() string {
	if e.Entity != "" {
		return fmt.Sprintf("invalid command for entity %q: %s", e.Entity, e.Reason)
	}
	return "invalid command: " + e.Reason
}

// DecodeCommand decodes and validates a command record (docs/events.md#command-events). It never
// panics; on failure the error is a *DecodeError. maxDataBytes <= 0 means
// DefaultMaxDataBytes.
func DecodeCommand(r *kgo.Record, maxDataBytes int) (cmd Command, err error) {
	return decodeCommand(r, maxDataBytes, true)
}

// DecodeCommandChecked is DecodeCommand for a reader that only needs to
// know whether a record is a valid command and its attributes: the same
// records decode and fail, with the same errors, and the command is the
// same except that Data and Fingerprint are left empty. The data is still
// read and checked as DecodeCommand checks it (size, media type, a JSON
// object in canonicalizable form); only the copy of it and the SHA-256 of
// the fingerprint, neither of which can fail, are skipped. The audit
// reads every command and never its data (FuzzDecodeCommandChecked).
func DecodeCommandChecked(r *kgo.Record, maxDataBytes int) (Command, error) {
	return decodeCommandWith(r, maxDataBytes, true, false)
}

// decodeCommand is DecodeCommand; fast false always goes through sdk-go
// (the fuzz test's reference).
func decodeCommand(r *kgo.Record, maxDataBytes int, fast bool) (cmd Command, err error) {
	return decodeCommandWith(r, maxDataBytes, fast, true)
}

// decodeCommandWith is decodeCommand; withData false leaves Data and
// Fingerprint empty (DecodeCommandChecked).
func decodeCommandWith(r *kgo.Record, maxDataBytes int, fast, withData bool) (cmd Command, err error) {
	if r == nil {
		return Command{}, &DecodeError{Reason: "nil record"}
	}
	if maxDataBytes <= 0 {
		maxDataBytes = DefaultMaxDataBytes
	}
	// Best-effort entity for errors, refined to the subject once read;
	// the record key when there is neither (made a string only for an
	// error: an allocation per command otherwise).
	var entity string
	if s, ok := header(r, headerPrefix+"subject"); ok && s != "" {
		entity = s
	}
	fail := func(format string, args ...any) (Command, error) {
		e := entity
		if e == "" {
			e = string(r.Key)
		}
		return Command{}, &DecodeError{Reason: fmt.Sprintf(format, args...), Entity: e}
	}
	defer func() {
		// Defense in depth: every sdk-go call is already guarded, but an
		// undecodable record must never stop the partition.
		if p := recover(); p != nil {
			cmd, err = fail("malformed event: %v", p)
		}
	}()

	if name := repeatedHeader(r.Headers); name != "" {
		return fail("header %q appears more than once", name)
	}

	var a ceAttrs
	ok, structured := false, false
	if fast && jsonEvent(r) {
		// What newMessage would say of it: structured, format JSON.
		structured = true
		a, ok = structuredFast(r.Value)
	}
	if !ok && !structured {
		m := newMessage(r)
		switch m.ReadEncoding() {
		case binding.EncodingBinary:
			// Cheap early reject before any parsing.
			if len(r.Value) > maxDataBytes {
				return fail("data is %d bytes, limit %d", len(r.Value), maxDataBytes)
			}
		case binding.EncodingStructured:
			structured = true
		}
		if fast && structured && m.format == format.JSON {
			a, ok = structuredFast(r.Value)
		}
	}
	if !ok {
		ev, err := toEvent(r)
		if err != nil {
			return fail("%v", err)
		}
		if structured {
			// Valid JSON (toEvent checked), read by sdk-go.
			if err := oneReading(r.Value); err != nil {
				return fail("%v", err)
			}
		}
		if sv := ev.SpecVersion(); sv != event.CloudEventsVersionV1 {
			return fail("unsupported specversion %q, want \"1.0\"", sv)
		}
		a = attrsOf(ev)
	}
	if a.subject != "" {
		entity = a.subject
	}
	for _, at := range [...]struct{ name, v string }{
		{"id", a.id}, {"source", a.source}, {"type", a.typ}, {"subject", a.subject},
	} {
		if at.v == "" {
			return fail("missing required attribute %q", at.name)
		}
	}
	if len(r.Key) > 0 && string(r.Key) != a.subject {
		return fail("record key %q differs from subject %q", r.Key, a.subject)
	}

	cmd = Command{
		ID:        a.id,
		Source:    a.source,
		Type:      a.typ,
		Subject:   a.subject,
		Partition: r.Partition,
		Offset:    r.Offset,
	}

	keyFrom := "idempotency key"
	if s, ok, isStr, v := a.extString(ExtIdempotencyKey); !ok {
		cmd.IdempotencyKey = cmd.Source + "/" + cmd.ID
		keyFrom = "idempotency key (default source/id)"
	} else if !isStr {
		return fail("extension %q must be a string, got %T", ExtIdempotencyKey, v)
	} else {
		cmd.IdempotencyKey = s
	}
	if n := len(cmd.IdempotencyKey); n < 1 || n > maxIdempotencyKeyBytes {
		return fail("idempotency key is %d bytes, want 1-%d", n, maxIdempotencyKeyBytes)
	}
	if problem := unprintable(cmd.IdempotencyKey); problem != "" {
		return fail("%s is not printable UTF-8: %s", keyFrom, problem)
	}

	if v, ok := a.ext(ExtExpectedVersion); ok {
		n, err := expectedVersion(v, structured, r.Value)
		if err != nil {
			return fail("extension %q: %v", ExtExpectedVersion, err)
		}
		cmd.ExpectedVersion = &n
	}

	if s, ok, isStr, v := a.extString(ExtDeadline); ok {
		if !isStr {
			return fail("extension %q must be an RFC 3339 string, got %T", ExtDeadline, v)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fail("extension %q is not an RFC 3339 time: %q", ExtDeadline, s)
		}
		cmd.Deadline = &t
	}

	if s, ok, isStr, v := a.extString(ExtTraceParent); ok {
		if !isStr {
			return fail("extension %q is not a W3C traceparent: %v", ExtTraceParent, v)
		}
		if !validTraceParent(s) {
			return fail("extension %q is not a W3C traceparent: %v", ExtTraceParent, s)
		}
		cmd.TraceParent = s
	}

	// By name, not through pointers into cmd: those moved cmd to the heap
	// (an allocation per command).
	for i, name := range [...]string{ExtControlKeyID, ExtControlSig} {
		if s, ok, isStr, v := a.extString(name); ok {
			if !isStr {
				return fail("extension %q must be a string, got %T", name, v)
			}
			if i == 0 {
				cmd.ControlKeyID = s
			} else {
				cmd.ControlSig = s
			}
		}
	}

	data := a.data
	if len(data) > 0 {
		if mt := a.mediaType; mt != "" && !isJSONMediaType(mt) {
			return fail("datacontenttype %q is not JSON", mt)
		}
		if len(data) > maxDataBytes {
			return fail("data is %d bytes, limit %d", len(data), maxDataBytes)
		}
		if first := firstNonSpace(data); first != '{' {
			return fail("data is not a JSON object: starts with %q", first)
		}
		canon := a.canon
		if canon == nil {
			if canon, err = jcs.CanonicalData(data); err != nil {
				return fail("data is not a JSON object: %v", err)
			}
		}
		if withData {
			// Keep our own copy: sdk-go may alias the record's buffer,
			// and kgo may reuse it.
			cmd.Data = json.RawMessage(append([]byte(nil), data...))
			cmd.Fingerprint = fingerprintCanonical(cmd.Type, cmd.Subject, canon)
		}
	} else if withData {
		cmd.Fingerprint = fingerprintCanonical(cmd.Type, cmd.Subject, nil)
	}
	return cmd, nil
}

// repeatedHeader returns the name of a header the CloudEvents Kafka
// binding reads (content-type, ce_*) that the record carries more than
// once, case aside, or "". Kafka allows a header twice; which one is
// meant does not follow: the mode is decided by the first content-type,
// sdk-go's binary reader keeps the last of two ce_ headers, and another
// reader may keep the first (another id, subject or idempotency key).
func repeatedHeader(hs []kgo.RecordHeader) string {
	if len(hs) < 2 { // a structured command's one content-type
		return ""
	}
	if len(hs) > 32 || !asciiKeys(hs) {
		// strings.ToLower, as sdk-go lowers names: EqualFold below
		// would fold more than it (ſ to s) outside ASCII.
		seen := make(map[string]bool, len(hs))
		for _, h := range hs {
			if k := strings.ToLower(h.Key); bindingHeader(k) {
				if seen[k] {
					return h.Key
				}
				seen[k] = true
			}
		}
		return ""
	}
	for i, h := range hs {
		if !bindingHeader(h.Key) {
			continue
		}
		for _, h2 := range hs[i+1:] {
			if strings.EqualFold(h.Key, h2.Key) { // ASCII: as ToLower
				return h2.Key
			}
		}
	}
	return ""
}

// asciiKeys reports whether every header name is ASCII.
func asciiKeys(hs []kgo.RecordHeader) bool {
	for _, h := range hs {
		if !isASCII(h.Key) {
			return false
		}
	}
	return true
}

// lowerEqual reports whether a and b are one name once lowered with
// strings.ToLower, as sdk-go lowers attribute and header names, and as
// the map of the many-names paths does (repeatedHeader, oneReading): so
// that whether a name counts twice does not depend on how many there are.
// strings.EqualFold alone folds more: ſ to s, where ToLower leaves ſ.
// For ASCII the two agree, and EqualFold does not allocate.
func lowerEqual[T string | []byte](a, b T) bool {
	if isASCII(a) && isASCII(b) {
		return strings.EqualFold(string(a), string(b))
	}
	//lint:ignore SA6005 ToLower on purpose: EqualFold folds more (see above)
	return strings.ToLower(string(a)) == strings.ToLower(string(b))
}

func isASCII[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// bindingHeader reports whether a header of this name is read by the
// CloudEvents Kafka binding.
func bindingHeader(name string) bool {
	return strings.EqualFold(name, headerContentType) || len(name) >= len(headerPrefix) && strings.EqualFold(name[:len(headerPrefix)], headerPrefix)
}

// oneReading refuses a structured command event that JSON readers could
// read differently: one that names an attribute twice, exactly or in
// other case (sdk-go folds extension names to lower case), or whose
// attributes are not I-JSON (RFC 7493: a string that is not valid
// Unicode, a number beyond an IEEE 754 double). sdk-go keeps the last of
// two members, another reader may keep the first: {"subject":"e1",...,
// "subject":"e2"} or two idempotencykeys would be two commands; sdk-go
// reads "\ud800" and "\udbff" as one U+FFFD. The data member is
// skipped: it is held to the same rules as the command's data
// (jcs.CanonicalData). What structuredFast answers has none of these (it
// declines a member twice and reads strictly), so this runs only where
// it declined, after sdk-go read the event (so value is valid JSON).
func oneReading(value []byte) error {
	p := jcs.Parser{Src: value, Mode: jcs.Mode{Strict: true, IJSON: true}}
	p.SkipSpace()
	if p.Pos >= len(value) || value[p.Pos] != '{' {
		return nil // sdk-go says what is wrong
	}
	p.Pos++
	p.SkipSpace()
	if p.Pos < len(value) && value[p.Pos] == '}' {
		return nil
	}
	var stack [16][]byte
	names := stack[:0]
	var folded map[string][]byte // past len(stack) names
	for {
		key, err := p.MemberKey()
		if err != nil {
			return fmt.Errorf("structured event is not I-JSON (RFC 7493): %v", err)
		}
		var first []byte
		if folded == nil && len(names) < len(stack) {
			for _, n := range names {
				if lowerEqual(n, key) {
					first = n
					break
				}
			}
			names = append(names, key)
		} else {
			if folded == nil {
				folded = make(map[string][]byte, 2*len(names))
				for _, n := range names {
					folded[strings.ToLower(string(n))] = n
				}
			}
			lk := strings.ToLower(string(key))
			first = folded[lk]
			if first == nil {
				folded[lk] = key
			}
		}
		if first != nil {
			return fmt.Errorf("structured event names attribute %q twice (%q and %q)", strings.ToLower(string(key)), first, key)
		}
		switch {
		case string(key) == "data":
			p.Pos = skipValid(value, p.Pos)
		case value[p.Pos] == '"':
			// Read, not written: a string (all but expectedversion) costs
			// nothing unless it has escapes.
			_, err = p.Str()
		default:
			err = p.Value(1)
			p.Out = p.Out[:0]
		}
		if err != nil {
			return fmt.Errorf("structured event: attribute %q is not I-JSON (RFC 7493): %v", key, err)
		}
		if more, err := p.MemberEnd(); err != nil || !more {
			return nil
		}
	}
}

// skipValid returns the end of the JSON value that starts at b[i], which
// is valid JSON.
func skipValid(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a scalar
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// unprintable says why key is not printable UTF-8 in the sense of docs/events.md#command-events,
// or "" if it is. Printable means valid UTF-8 without control characters:
// Unicode category Cc, U+0000–U+001F and U+007F–U+009F. That set is fixed by
// Unicode's stability policy, so two builds with different Unicode tables
// never disagree about a key (a key one executor accepted and another
// rejected would be decoded differently after a rebalance). The problem is
// described by position and code point, never by echoing the key: the
// reason goes into a deadletter header and logs.
func unprintable(key string) string {
	for i, r := range key {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(key[i:]); size == 1 { // not an encoded U+FFFD
				return fmt.Sprintf("invalid UTF-8 at byte %d", i)
			}
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			return fmt.Sprintf("control character %U at byte %d", r, i)
		}
	}
	return ""
}

// expectedVersion reads the expectedversion extension. Binary headers carry
// it as a string. In structured JSON it may be a string or a number; sdk-go
// turns numbers into int32 (CloudEvents Integer) and silently truncates
// fractions, so for numbers the literal is re-read from the JSON and parsed
// strictly. Versions beyond int32 must be sent as strings in JSON.
func expectedVersion(v any, structured bool, value []byte) (int64, error) {
	var lit string
	switch t := v.(type) {
	case string:
		lit = t
	case int32:
		if !structured {
			lit = strconv.FormatInt(int64(t), 10)
			break
		}
		raw, ok := topLevelMember(value, ExtExpectedVersion)
		if !ok {
			return 0, errors.New("cannot re-read number")
		}
		lit = strings.TrimSpace(string(raw))
	default:
		return 0, fmt.Errorf("must be an integer, got %T", v)
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not an integer: %q", lit)
	}
	if n < 0 {
		return 0, fmt.Errorf("must be >= 0, got %d", n)
	}
	return n, nil
}

// topLevelMember returns the raw JSON of the last top-level member name (the
// one sdk-go kept). It is only called when that member exists.
func topLevelMember(value []byte, name string) (raw []byte, ok bool) {
	iter := jsoniter.ParseBytes(jsoniter.ConfigFastest, value)
	for key := iter.ReadObject(); key != "" && iter.Error == nil; key = iter.ReadObject() {
		if key == name {
			raw, ok = iter.SkipAndReturnBytes(), true
			continue
		}
		iter.Skip()
	}
	return raw, ok && iter.Error == nil
}

// isJSONMediaType matches application/json and any +json suffix, which is
// what sdk-go treats as JSON and keeps inline.
func isJSONMediaType(mt string) bool {
	mt = strings.ToLower(mt)
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

// validTraceParent checks the W3C trace-context traceparent shape loosely:
// version-traceid-parentid-flags in lowercase hex, version not ff, ids not
// all zero; version 00 has exactly four fields, later versions may append.
func validTraceParent(s string) bool {
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') {
		return false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	ver, trace, parent, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	for _, part := range []string{ver, trace, parent, flags} {
		for i := 0; i < len(part); i++ {
			if c := part[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	if ver == "ff" || (ver == "00" && len(s) != 55) {
		return false
	}
	return strings.Trim(trace, "0") != "" && strings.Trim(parent, "0") != ""
}
