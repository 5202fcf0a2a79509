// Package jcs writes canonical JSON for hashing: RFC 8785 (JCS) for record
// hashes and the v1 form of command fingerprints, in one byte-level pass
// without reflection. It sits below schemas, which decodes commands and
// records with its Parser, and internal/wire, which encodes records with it;
// it knows nothing of either.
package jcs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Mode selects one of the two canonical forms the package writes.
//
// Both sort object keys, drop insignificant whitespace and escape strings
// minimally; they differ where RFC 8785 (JCS) made choices the fingerprint
// (v1, fixed before JCS was adopted, and stable forever because stored
// fingerprints are compared with new ones) did not:
//
//	                  v1 fingerprint            JCS (record hashes)
//	numbers           literal text (1.0 ≠ 1)    ES6 shortest form (1.0 → 1)
//	key order         UTF-8 bytes               UTF-16 code units
//	\b and \f         \u0008, \u000c            \b, \f
type Mode struct {
	// JCS selects RFC 8785; otherwise the v1 fingerprint form.
	JCS bool
	// Strict makes a duplicate object key an error; otherwise the last one
	// wins (encoding/json's rule), for data we did not accept ourselves.
	Strict bool
	// DropHash leaves out the top-level "hash" member: a record's hash is
	// computed over the record without it.
	DropHash bool
	// IJSON refuses what is not I-JSON (RFC 7493): a number that is not
	// an IEEE 754 double, which the v1 form otherwise keeps as written;
	// invalid UTF-8 and an escaped lone surrogate, which otherwise
	// become U+FFFD. A command's data is refused at decode when it is
	// not I-JSON: its record, hashed in the JCS form, could not be
	// written (a number beyond doubles has none), and the executor would
	// retry that record forever, its partition stuck behind it; and
	// "\ud800", "\udfff", "\ufffd" and a raw 0xff, four different
	// strings to a producer, would have one fingerprint and one record
	// hash (a key reused with other data taken for a repeat).
	IJSON bool
}

// errUnexpectedEnd is the error for input that stops inside a value.
var errUnexpectedEnd = errors.New("unexpected end of JSON")

// AppendCanonical appends the canonical form of the JSON text src to dst.
//
// It is a single pass over bytes with no reflection and, for input that is
// already canonical (the common case: records we wrote ourselves), no
// allocation beyond dst: a hash is computed over bytes, never by decoding
// into Go values and encoding again.
func AppendCanonical(dst, src []byte, m Mode) ([]byte, error) {
	p := Parser{Src: src, Mode: m, Out: dst}
	p.SkipSpace()
	if err := p.Value(0); err != nil {
		return nil, err
	}
	p.SkipSpace()
	if p.Pos != len(src) {
		return nil, errors.New("trailing data after JSON value")
	}
	return p.Out, nil
}

// Canonical returns the RFC 8785 canonical form of a JSON text. Duplicate
// object keys are an error (RFC 8785 requires I-JSON); numbers must fit
// IEEE 754 doubles.
func Canonical(raw []byte) ([]byte, error) {
	return AppendCanonical(make([]byte, 0, len(raw)), raw, Mode{JCS: true, Strict: true})
}

// CanonicalV1 returns the v1 canonical text of a JSON value, the form
// command fingerprints hash, so that two encodings of the same value (key
// order, whitespace, escapes) hash alike: object keys sorted by byte order
// of their UTF-8, no insignificant whitespace, strings re-escaped minimally
// (only '"', '\\' and control characters), numbers kept as their literal
// text (1.0 and 1 differ: we do not guess the sender's numeric semantics).
// Trailing data after the value is an error. With strict a duplicate object
// key is an error (which one a consumer would see is ambiguous); without,
// the last one wins (encoding/json's rule), for hashing data we did not
// accept ourselves (connector results) where failing is worse than choosing.
func CanonicalV1(raw []byte, strict bool) ([]byte, error) {
	return AppendCanonical(make([]byte, 0, len(raw)), raw, Mode{Strict: strict})
}

// CanonicalData is CanonicalV1 (strict) for a command's data, which must
// also be I-JSON (Mode.IJSON): the same form of what it accepts, and an
// error for what a record could not carry.
func CanonicalData(raw []byte) ([]byte, error) {
	return AppendCanonical(make([]byte, 0, len(raw)), raw, Mode{Strict: true, IJSON: true})
}

// maxDepth bounds JSON nesting so hostile input cannot drive deep recursion.
const maxDepth = 512

const hexDigits = "0123456789abcdef"

// WriteFramed writes len(b) as 8 bytes big-endian, then b: the framing of
// every hash over several parts (fingerprints, outcome ids, unique keys,
// control signatures), so that no two different part lists frame to the
// same bytes.
func WriteFramed(w io.Writer, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	w.Write(n[:])
	w.Write(b)
}

// AppendFramed appends b framed as WriteFramed writes it: for a hash
// over parts that fit a caller's stack buffer (sha256.Sum256 of it),
// which costs no heap object where a hash.Hash and a []byte per string
// part cost several.
func AppendFramed[T ~string | ~[]byte](dst []byte, b T) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(b)))
	return append(dst, b...)
}

// Parser reads one JSON text from Src at Pos and writes its canonical form
// (as Mode says) to Out. Besides Value, which does both for a whole value,
// schemas' command and record decoders drive it member by member
// (MemberKey, MemberEnd, Str) to read the shapes they know without
// reflection.
type Parser struct {
	Src  []byte
	Pos  int
	Mode Mode
	Out  []byte
}

type member struct {
	key        []byte // decoded
	start, end int    // `"key":value` in out
}

// SkipSpace moves Pos past JSON whitespace.
func (p *Parser) SkipSpace() {
	// One comparison for the byte that is not a space (canonical JSON
	// has none).
	for p.Pos < len(p.Src) && p.Src[p.Pos] <= ' ' {
		switch p.Src[p.Pos] {
		case ' ', '\t', '\n', '\r':
			p.Pos++
		default:
			return
		}
	}
}

func (p *Parser) errAt(what string) error {
	if p.Pos >= len(p.Src) {
		return errUnexpectedEnd
	}
	return fmt.Errorf("invalid character %q %s (offset %d)", p.Src[p.Pos], what, p.Pos)
}

// Value reads the JSON value at Pos (nested depth deep) and appends its
// canonical form to Out.
func (p *Parser) Value(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("JSON nested deeper than %d", maxDepth)
	}
	if p.Pos >= len(p.Src) {
		return errUnexpectedEnd
	}
	switch c := p.Src[p.Pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.Str()
		if err != nil {
			return err
		}
		p.Out = p.appendStr(p.Out, s)
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.errAt("looking for beginning of value")
}

func (p *Parser) literal(lit string) error {
	if !bytes.HasPrefix(p.Src[p.Pos:], []byte(lit)) {
		if len(p.Src)-p.Pos < len(lit) && bytes.HasPrefix([]byte(lit), p.Src[p.Pos:]) {
			return errUnexpectedEnd
		}
		return p.errAt("in literal " + lit)
	}
	p.Pos += len(lit)
	p.Out = append(p.Out, lit...)
	return nil
}

func (p *Parser) object(depth int) error {
	p.Pos++ // '{'
	start := len(p.Out)
	p.Out = append(p.Out, '{')
	var stack [16]member
	ms := stack[:0]
	sorted := true
	p.SkipSpace()
	if p.Pos < len(p.Src) && p.Src[p.Pos] == '}' {
		p.Pos++
		p.Out = append(p.Out, '}')
		return nil
	}
	for {
		key, err := p.MemberKey()
		if err != nil {
			return err
		}
		if depth == 0 && p.Mode.DropHash && string(key) == "hash" {
			mark := len(p.Out)
			if err := p.Value(depth + 1); err != nil {
				return err
			}
			p.Out = p.Out[:mark]
		} else {
			if len(ms) > 0 {
				p.Out = append(p.Out, ',')
			}
			s := len(p.Out)
			p.Out = p.appendStr(p.Out, key)
			p.Out = append(p.Out, ':')
			if err := p.Value(depth + 1); err != nil {
				return err
			}
			if len(ms) > 0 && p.compareKeys(ms[len(ms)-1].key, key) >= 0 {
				sorted = false
			}
			ms = append(ms, member{key: key, start: s, end: len(p.Out)})
		}
		more, err := p.MemberEnd()
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if !sorted {
		if err := p.reorder(start, ms); err != nil {
			return err
		}
	}
	p.Out = append(p.Out, '}')
	return nil
}

// MemberKey reads an object member's key and its colon (spaces around
// them skipped), leaving p.Pos at the value.
func (p *Parser) MemberKey() ([]byte, error) {
	// The form every encoder here writes, `"key":` with plain bytes and
	// no space: the key is the bytes between the quotes, as Str returns
	// them (a record's decode spent a third of its time on its keys).
	if i := p.Pos; i < len(p.Src) && p.Src[i] == '"' {
		j := i + 1 + plainRun(p.Src[i+1:])
		if j+1 < len(p.Src) && p.Src[j] == '"' && p.Src[j+1] == ':' {
			p.Pos = j + 2
			p.SkipSpace()
			return p.Src[i+1 : j], nil
		}
	}
	p.SkipSpace()
	if p.Pos >= len(p.Src) {
		return nil, errUnexpectedEnd
	}
	if p.Src[p.Pos] != '"' {
		return nil, p.errAt("looking for beginning of object key string")
	}
	key, err := p.Str()
	if err != nil {
		return nil, err
	}
	p.SkipSpace()
	if p.Pos >= len(p.Src) {
		return nil, errUnexpectedEnd
	}
	if p.Src[p.Pos] != ':' {
		return nil, p.errAt("after object key")
	}
	p.Pos++
	p.SkipSpace()
	return key, nil
}

// MemberEnd reads what follows a member's value: a ',' (more is true: a
// member follows) or the object's '}'.
func (p *Parser) MemberEnd() (more bool, err error) {
	return p.ElemEnd('}')
}

// ElemEnd reads what follows a member's or an element's value: a ','
// (more is true) or end, the object's '}' or the array's ']'.
func (p *Parser) ElemEnd(end byte) (more bool, err error) {
	p.SkipSpace()
	if p.Pos >= len(p.Src) {
		return false, errUnexpectedEnd
	}
	switch p.Src[p.Pos] {
	case ',':
		p.Pos++
		return true, nil
	case end:
		p.Pos++
		return false, nil
	}
	if end == ']' {
		return false, p.errAt("after array element")
	}
	return false, p.errAt("after object key:value pair")
}

// reorder rewrites the members written after out[start] ('{') in key
// order, applying the duplicate-key rule.
func (p *Parser) reorder(start int, ms []member) error {
	body := append([]byte(nil), p.Out[start+1:]...)
	base := start + 1
	// Stable: duplicate keys stay in input order, so the last one wins.
	slices.SortStableFunc(ms, func(a, b member) int { return p.compareKeys(a.key, b.key) })
	p.Out = p.Out[:base]
	first := true
	for i, m := range ms {
		if i+1 < len(ms) && bytes.Equal(ms[i+1].key, m.key) {
			if p.Mode.Strict {
				return fmt.Errorf("duplicate object key %q", m.key)
			}
			continue
		}
		if !first {
			p.Out = append(p.Out, ',')
		}
		first = false
		p.Out = append(p.Out, body[m.start-base:m.end-base]...)
	}
	return nil
}

// compareKeys orders decoded keys: by UTF-8 bytes (v1) or by UTF-16 code
// units (JCS). The two differ only between a character above U+FFFF and
// one in U+E000–U+FFFF.
func (p *Parser) compareKeys(a, b []byte) int {
	if !p.Mode.JCS {
		return bytes.Compare(a, b)
	}
	return compareUTF16(a, b)
}

func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			ua, la := utf16Units(ra)
			ub, lb := utf16Units(rb)
			if ua != ub {
				return cmpInt(int(ua), int(ub))
			}
			return cmpInt(int(la), int(lb))
		}
		a, b = a[na:], b[nb:]
	}
	return cmpInt(len(a), len(b))
}

func utf16Units(r rune) (hi, lo uint16) {
	if r >= 0x10000 {
		h, l := utf16.EncodeRune(r)
		return uint16(h), uint16(l)
	}
	return uint16(r), 0
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (p *Parser) array(depth int) error {
	p.Pos++ // '['
	p.Out = append(p.Out, '[')
	p.SkipSpace()
	if p.Pos < len(p.Src) && p.Src[p.Pos] == ']' {
		p.Pos++
		p.Out = append(p.Out, ']')
		return nil
	}
	for n := 0; ; n++ {
		if n > 0 {
			p.Out = append(p.Out, ',')
		}
		p.SkipSpace()
		if err := p.Value(depth + 1); err != nil {
			return err
		}
		more, err := p.ElemEnd(']')
		if err != nil {
			return err
		}
		if !more {
			p.Out = append(p.Out, ']')
			return nil
		}
	}
}

// Str reads the string at p.Pos (an opening quote) and returns its decoded
// bytes: a slice of src when it has no escapes and is valid UTF-8.
// Invalid UTF-8 and lone surrogate escapes become U+FFFD, as encoding/json
// decodes them (in Mode.IJSON they are an error).
func (p *Parser) Str() ([]byte, error) {
	p.Pos++ // '"'
	start := p.Pos
	for p.Pos < len(p.Src) {
		p.Pos += plainRun(p.Src[p.Pos:])
		if p.Pos >= len(p.Src) {
			break
		}
		c := p.Src[p.Pos]
		switch {
		case c == '"':
			s := p.Src[start:p.Pos]
			p.Pos++
			return s, nil
		case c == '\\':
			return p.strSlow(start)
		case c < 0x20:
			return nil, p.errAt("in string literal")
		case c < utf8.RuneSelf:
			p.Pos++
		default:
			r, n := utf8.DecodeRune(p.Src[p.Pos:])
			if r == utf8.RuneError && n == 1 {
				return p.strSlow(start)
			}
			p.Pos += n
		}
	}
	return nil, errUnexpectedEnd
}

func (p *Parser) strSlow(start int) ([]byte, error) {
	buf := append([]byte(nil), p.Src[start:p.Pos]...)
	for p.Pos < len(p.Src) {
		c := p.Src[p.Pos]
		switch {
		case c == '"':
			p.Pos++
			return buf, nil
		case c < 0x20:
			return nil, p.errAt("in string literal")
		case c == '\\':
			if p.Pos+1 >= len(p.Src) {
				return nil, errUnexpectedEnd
			}
			e := p.Src[p.Pos+1]
			p.Pos += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := hex4(p.Src[p.Pos:])
				if !ok {
					if len(p.Src)-p.Pos < 4 {
						return nil, errUnexpectedEnd
					}
					return nil, p.errAt("in \\u hexadecimal character escape")
				}
				p.Pos += 4
				if utf16.IsSurrogate(r) {
					// encoding/json: a valid pair combines; anything else
					// is U+FFFD, and the next escape stands on its own.
					if len(p.Src)-p.Pos >= 6 && p.Src[p.Pos] == '\\' && p.Src[p.Pos+1] == 'u' {
						if r2, ok := hex4(p.Src[p.Pos+2:]); ok {
							if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
								buf = utf8.AppendRune(buf, d)
								p.Pos += 6
								continue
							}
						}
					}
					if p.Mode.IJSON {
						p.Pos -= 6
						return nil, fmt.Errorf("lone surrogate \\u%04x in string (offset %d; I-JSON)", r, p.Pos)
					}
					r = utf8.RuneError
				}
				buf = utf8.AppendRune(buf, r)
			default:
				p.Pos--
				return nil, p.errAt("in string escape code")
			}
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.Pos++
		default:
			r, n := utf8.DecodeRune(p.Src[p.Pos:])
			if r == utf8.RuneError && n == 1 {
				if p.Mode.IJSON {
					return nil, fmt.Errorf("invalid UTF-8 in string (offset %d; I-JSON)", p.Pos)
				}
				buf = utf8.AppendRune(buf, utf8.RuneError)
			} else {
				buf = append(buf, p.Src[p.Pos:p.Pos+n]...)
			}
			p.Pos += n
		}
	}
	return nil, errUnexpectedEnd
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// appendStr writes decoded, valid UTF-8 s as a canonical JSON string.
func (p *Parser) appendStr(dst, s []byte) []byte {
	dst = append(dst, '"')
	for _, c := range s[plainRun(s):] {
		if c < 0x20 || c == '"' || c == '\\' {
			return appendEscaped(dst, s, p.Mode.JCS)
		}
	}
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendEscaped writes s (valid UTF-8, the opening quote already written)
// with the escapes of the chosen form, and the closing quote.
func appendEscaped(dst, s []byte, jcs bool) []byte {
	for _, c := range s {
		switch {
		case c == '"':
			dst = append(dst, '\\', '"')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\b' && jcs:
			dst = append(dst, '\\', 'b')
		case c == '\f' && jcs:
			dst = append(dst, '\\', 'f')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// AppendString writes a Go string as a JCS string; invalid UTF-8
// becomes U+FFFD, as encoding/json writes it.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	if plainRun(s) == len(s) {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b := []byte(s)
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	}
	return appendEscaped(dst, b, true)
}

// shortInteger reports whether the number literal lit (integer: without
// fraction or exponent, as ScanNumber says) has at most 15 digits: an
// exact double whose ES6 form is the literal itself ("-0" aside).
func shortInteger(lit []byte, integer bool) bool {
	nd := len(lit)
	if lit[0] == '-' {
		nd--
	}
	return integer && nd <= 15
}

// number validates the JSON number at p.Pos and appends its canonical form.
func (p *Parser) number() error {
	lit, integer, err := p.ScanNumber()
	if err != nil {
		return err
	}
	short := shortInteger(lit, integer)
	if !p.Mode.JCS {
		if p.Mode.IJSON && !short {
			if _, err := strconv.ParseFloat(string(lit), 64); err != nil {
				return fmt.Errorf("number %s is not an IEEE 754 double (I-JSON)", lit)
			}
		}
		p.Out = append(p.Out, lit...)
		return nil
	}
	if short {
		if string(lit) == "-0" {
			p.Out = append(p.Out, '0')
		} else {
			p.Out = append(p.Out, lit...)
		}
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return fmt.Errorf("number %s is not an IEEE 754 double (RFC 8785): %w", lit, err)
	}
	p.Out = AppendES6Number(p.Out, f)
	return nil
}

// AppendES6Number writes f as ECMAScript's Number.prototype.toString does,
// which is what RFC 8785 §3.2.2.3 prescribes: shortest round-trip digits,
// fixed notation for 1e-6 <= |f| < 1e21, exponent without leading zeros.
func AppendES6Number(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	format := byte('e')
	if f >= 1e-6 && f < 1e21 {
		format = 'f'
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// Go writes e+07 / e-07; ES6 writes e+7 / e-7.
		if e := bytes.IndexByte(dst[start:], 'e'); e >= 0 {
			at := start + e + 2
			if at < len(dst) && dst[at] == '0' {
				dst = append(dst[:at], dst[at+1:]...)
			}
		}
	}
	return dst
}

// ScanNumber reads the JSON number at p.Pos by JSON's grammar,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns its literal
// (a slice of Src) and whether it is an integer; it writes nothing. Value
// canonicalizes what it returns; a reader that only skips a value calls it
// alone.
func (p *Parser) ScanNumber() (lit []byte, integer bool, err error) {
	start := p.Pos
	if p.Pos < len(p.Src) && p.Src[p.Pos] == '-' {
		p.Pos++
	}
	digits := func() int {
		n := 0
		for p.Pos < len(p.Src) && p.Src[p.Pos] >= '0' && p.Src[p.Pos] <= '9' {
			p.Pos++
			n++
		}
		return n
	}
	if p.Pos >= len(p.Src) {
		return nil, false, errUnexpectedEnd
	}
	integer = true
	switch c := p.Src[p.Pos]; {
	case c == '0':
		p.Pos++
	case c >= '1' && c <= '9':
		digits()
	default:
		return nil, false, p.errAt("in numeric literal")
	}
	if p.Pos < len(p.Src) && p.Src[p.Pos] == '.' {
		p.Pos++
		integer = false
		if digits() == 0 {
			return nil, false, p.errAt("after decimal point in numeric literal")
		}
	}
	if p.Pos < len(p.Src) && (p.Src[p.Pos] == 'e' || p.Src[p.Pos] == 'E') {
		p.Pos++
		integer = false
		if p.Pos < len(p.Src) && (p.Src[p.Pos] == '+' || p.Src[p.Pos] == '-') {
			p.Pos++
		}
		if digits() == 0 {
			return nil, false, p.errAt("in exponent of numeric literal")
		}
	}
	return p.Src[start:p.Pos], integer, nil
}
