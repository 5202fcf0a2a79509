package schemas

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// canonMode selects one of the two canonical forms the package writes.
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
type canonMode struct {
	jcs bool
	// strict makes a duplicate object key an error; otherwise the last one
	// wins (encoding/json's rule), for data we did not accept ourselves.
	strict bool
	// dropHash leaves out the top-level "hash" member: a record's hash is
	// computed over the record without it.
	dropHash bool
}

// errUnexpectedEnd is the error for input that stops inside a value.
var errUnexpectedEnd = errors.New("unexpected end of JSON")

// appendCanonical appends the canonical form of the JSON text src to dst.
//
// It is a single pass over bytes with no reflection and, for input that is
// already canonical (the common case: records we wrote ourselves), no
// allocation beyond dst: a hash is computed over bytes, never by decoding
// into Go values and encoding again.
func appendCanonical(dst, src []byte, m canonMode) ([]byte, error) {
	p := canonParser{src: src, mode: m, out: dst}
	p.skipSpace()
	if err := p.value(0); err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i != len(src) {
		return nil, errors.New("trailing data after JSON value")
	}
	return p.out, nil
}

// canonicalJCS returns the RFC 8785 canonical form of a JSON text. Duplicate object
// keys are an error (RFC 8785 requires I-JSON); numbers must fit IEEE 754
// doubles.
func canonicalJCS(raw []byte) ([]byte, error) {
	return appendCanonical(make([]byte, 0, len(raw)), raw, canonMode{jcs: true, strict: true})
}

type canonParser struct {
	src  []byte
	i    int
	mode canonMode
	out  []byte
}

type canonMember struct {
	key        []byte // decoded
	start, end int    // `"key":value` in out
}

func (p *canonParser) skipSpace() {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *canonParser) errAt(what string) error {
	if p.i >= len(p.src) {
		return errUnexpectedEnd
	}
	return fmt.Errorf("invalid character %q %s (offset %d)", p.src[p.i], what, p.i)
}

func (p *canonParser) value(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("JSON nested deeper than %d", maxDepth)
	}
	if p.i >= len(p.src) {
		return errUnexpectedEnd
	}
	switch c := p.src[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return err
		}
		p.out = p.appendStr(p.out, s)
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

func (p *canonParser) literal(lit string) error {
	if !bytes.HasPrefix(p.src[p.i:], []byte(lit)) {
		if len(p.src)-p.i < len(lit) && bytes.HasPrefix([]byte(lit), p.src[p.i:]) {
			return errUnexpectedEnd
		}
		return p.errAt("in literal " + lit)
	}
	p.i += len(lit)
	p.out = append(p.out, lit...)
	return nil
}

func (p *canonParser) object(depth int) error {
	p.i++ // '{'
	start := len(p.out)
	p.out = append(p.out, '{')
	var stack [16]canonMember
	ms := stack[:0]
	sorted := true
	p.skipSpace()
	if p.i < len(p.src) && p.src[p.i] == '}' {
		p.i++
		p.out = append(p.out, '}')
		return nil
	}
	for {
		key, err := p.memberKey()
		if err != nil {
			return err
		}
		if depth == 0 && p.mode.dropHash && string(key) == "hash" {
			mark := len(p.out)
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.out = p.out[:mark]
		} else {
			if len(ms) > 0 {
				p.out = append(p.out, ',')
			}
			s := len(p.out)
			p.out = p.appendStr(p.out, key)
			p.out = append(p.out, ':')
			if err := p.value(depth + 1); err != nil {
				return err
			}
			if len(ms) > 0 && p.compareKeys(ms[len(ms)-1].key, key) >= 0 {
				sorted = false
			}
			ms = append(ms, canonMember{key: key, start: s, end: len(p.out)})
		}
		more, err := p.memberEnd()
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
	p.out = append(p.out, '}')
	return nil
}

// memberKey reads an object member's key and its colon (spaces around
// them skipped), leaving p.i at the value.
func (p *canonParser) memberKey() ([]byte, error) {
	p.skipSpace()
	if p.i >= len(p.src) {
		return nil, errUnexpectedEnd
	}
	if p.src[p.i] != '"' {
		return nil, p.errAt("looking for beginning of object key string")
	}
	key, err := p.str()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i >= len(p.src) {
		return nil, errUnexpectedEnd
	}
	if p.src[p.i] != ':' {
		return nil, p.errAt("after object key")
	}
	p.i++
	p.skipSpace()
	return key, nil
}

// memberEnd reads what follows a member's value: a ',' (more is true: a
// member follows) or the object's '}'.
func (p *canonParser) memberEnd() (more bool, err error) {
	p.skipSpace()
	if p.i >= len(p.src) {
		return false, errUnexpectedEnd
	}
	switch p.src[p.i] {
	case ',':
		p.i++
		return true, nil
	case '}':
		p.i++
		return false, nil
	}
	return false, p.errAt("after object key:value pair")
}

// reorder rewrites the members written after out[start] ('{') in key
// order, applying the duplicate-key rule.
func (p *canonParser) reorder(start int, ms []canonMember) error {
	body := append([]byte(nil), p.out[start+1:]...)
	base := start + 1
	// Stable: duplicate keys stay in input order, so the last one wins.
	slices.SortStableFunc(ms, func(a, b canonMember) int { return p.compareKeys(a.key, b.key) })
	p.out = p.out[:base]
	first := true
	for i, m := range ms {
		if i+1 < len(ms) && bytes.Equal(ms[i+1].key, m.key) {
			if p.mode.strict {
				return fmt.Errorf("duplicate object key %q", m.key)
			}
			continue
		}
		if !first {
			p.out = append(p.out, ',')
		}
		first = false
		p.out = append(p.out, body[m.start-base:m.end-base]...)
	}
	return nil
}

// compareKeys orders decoded keys: by UTF-8 bytes (v1) or by UTF-16 code
// units (JCS). The two differ only between a character above U+FFFF and
// one in U+E000–U+FFFF.
func (p *canonParser) compareKeys(a, b []byte) int {
	if !p.mode.jcs {
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

func (p *canonParser) array(depth int) error {
	p.i++ // '['
	p.out = append(p.out, '[')
	p.skipSpace()
	if p.i < len(p.src) && p.src[p.i] == ']' {
		p.i++
		p.out = append(p.out, ']')
		return nil
	}
	for n := 0; ; n++ {
		if n > 0 {
			p.out = append(p.out, ',')
		}
		p.skipSpace()
		if err := p.value(depth + 1); err != nil {
			return err
		}
		p.skipSpace()
		if p.i >= len(p.src) {
			return errUnexpectedEnd
		}
		switch p.src[p.i] {
		case ',':
			p.i++
			continue
		case ']':
			p.i++
			p.out = append(p.out, ']')
			return nil
		}
		return p.errAt("after array element")
	}
}

// str reads the string at p.i (an opening quote) and returns its decoded
// bytes: a slice of src when it has no escapes and is valid UTF-8.
// Invalid UTF-8 and lone surrogate escapes become U+FFFD, as encoding/json
// decodes them.
func (p *canonParser) str() ([]byte, error) {
	p.i++ // '"'
	start := p.i
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '"':
			s := p.src[start:p.i]
			p.i++
			return s, nil
		case c == '\\':
			return p.strSlow(start)
		case c < 0x20:
			return nil, p.errAt("in string literal")
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, n := utf8.DecodeRune(p.src[p.i:])
			if r == utf8.RuneError && n == 1 {
				return p.strSlow(start)
			}
			p.i += n
		}
	}
	return nil, errUnexpectedEnd
}

func (p *canonParser) strSlow(start int) ([]byte, error) {
	buf := append([]byte(nil), p.src[start:p.i]...)
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '"':
			p.i++
			return buf, nil
		case c < 0x20:
			return nil, p.errAt("in string literal")
		case c == '\\':
			if p.i+1 >= len(p.src) {
				return nil, errUnexpectedEnd
			}
			e := p.src[p.i+1]
			p.i += 2
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
				r, ok := hex4(p.src[p.i:])
				if !ok {
					if len(p.src)-p.i < 4 {
						return nil, errUnexpectedEnd
					}
					return nil, p.errAt("in \\u hexadecimal character escape")
				}
				p.i += 4
				if utf16.IsSurrogate(r) {
					// encoding/json: a valid pair combines; anything else
					// is U+FFFD, and the next escape stands on its own.
					if len(p.src)-p.i >= 6 && p.src[p.i] == '\\' && p.src[p.i+1] == 'u' {
						if r2, ok := hex4(p.src[p.i+2:]); ok {
							if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
								buf = utf8.AppendRune(buf, d)
								p.i += 6
								continue
							}
						}
					}
					r = utf8.RuneError
				}
				buf = utf8.AppendRune(buf, r)
			default:
				p.i--
				return nil, p.errAt("in string escape code")
			}
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.i++
		default:
			r, n := utf8.DecodeRune(p.src[p.i:])
			if r == utf8.RuneError && n == 1 {
				buf = utf8.AppendRune(buf, utf8.RuneError)
			} else {
				buf = append(buf, p.src[p.i:p.i+n]...)
			}
			p.i += n
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
func (p *canonParser) appendStr(dst, s []byte) []byte {
	dst = append(dst, '"')
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' {
			return appendEscaped(dst, s, p.mode.jcs)
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

// appendJCSString writes a Go string as a JCS string; invalid UTF-8
// becomes U+FFFD, as encoding/json writes it.
func appendJCSString(dst []byte, s string) []byte {
	clean := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			clean = false
			break
		}
	}
	dst = append(dst, '"')
	if clean {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b := []byte(s)
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	}
	return appendEscaped(dst, b, true)
}

// number validates the JSON number at p.i and appends its canonical form.
func (p *canonParser) number() error {
	start := p.i
	if p.src[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.src) && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i >= len(p.src) {
		return errUnexpectedEnd
	}
	integer := true
	switch c := p.src[p.i]; {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		digits()
	default:
		return p.errAt("in numeric literal")
	}
	if p.i < len(p.src) && p.src[p.i] == '.' {
		p.i++
		integer = false
		if digits() == 0 {
			return p.errAt("after decimal point in numeric literal")
		}
	}
	if p.i < len(p.src) && (p.src[p.i] == 'e' || p.src[p.i] == 'E') {
		p.i++
		integer = false
		if p.i < len(p.src) && (p.src[p.i] == '+' || p.src[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return p.errAt("in exponent of numeric literal")
		}
	}
	lit := p.src[start:p.i]
	if !p.mode.jcs {
		p.out = append(p.out, lit...)
		return nil
	}
	// Integers of up to 15 digits are exact doubles whose ES6 form is the
	// literal itself ("-0" aside).
	if nd := len(lit); integer {
		if lit[0] == '-' {
			nd--
		}
		if nd <= 15 {
			if string(lit) == "-0" {
				p.out = append(p.out, '0')
			} else {
				p.out = append(p.out, lit...)
			}
			return nil
		}
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return fmt.Errorf("number %s is not an IEEE 754 double (RFC 8785): %w", lit, err)
	}
	p.out = appendES6Number(p.out, f)
	return nil
}

// appendES6Number writes f as ECMAScript's Number.prototype.toString does,
// which is what RFC 8785 §3.2.2.3 prescribes: shortest round-trip digits,
// fixed notation for 1e-6 <= |f| < 1e21, exponent without leading zeros.
func appendES6Number(dst []byte, f float64) []byte {
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
