package jcs

import (
	"bytes"
	"strconv"
)

// A record's data and result are JSON its encoder (internal/wire) must
// write in their RFC 8785 form. Almost always they are in it already: the
// record was read back from Pebble or the journal, whose bytes that
// encoder wrote, or the command's data was canonical to begin with.
// Running them through AppendCanonical again was the biggest part of
// encoding a repeat's outcome (BENCHMARKS.md, round 8), so the encoder
// first asks IsCanonical, a scan that writes nothing, and copies them when
// it says yes.
//
// IsCanonical is conservative: it says yes only for text that
// AppendCanonical(Mode{JCS: true}) copies unchanged (FuzzIsCanonical
// holds it to that), and no to anything it would have to think about —
// whitespace, any escape in a string, a number that is not a short
// integer, keys whose UTF-8 and UTF-16 orders could differ, deep nesting.
// A no costs only the scan; AppendCanonical then writes the text as
// before.

// canonicalDepth bounds the nesting IsCanonical follows; deeper text goes
// to AppendCanonical, which has its own (larger) limit and error.
const canonicalDepth = 64

// IsCanonical reports whether b is one JSON value that is its own JCS
// canonical form, as far as a cheap scan can tell (see above).
func IsCanonical(b []byte) bool {
	n, ok := CanonicalPrefix(b)
	return ok && n == len(b)
}

// CanonicalPrefix is IsCanonical for the JSON value b starts with, which
// may be followed by anything: n is its length. Such a value is also its
// own v1 (CanonicalV1) form, strict or not — without escapes, fractions,
// exponents or long integers, with keys in increasing byte order, the two
// forms agree — so a command's data can be fingerprinted as it is, where
// it lies in the event (schemas' structuredFast).
func CanonicalPrefix(b []byte) (n int, ok bool) {
	c := canonScan{b: b}
	if !c.value(0) {
		return 0, false
	}
	return c.pos, true
}

type canonScan struct {
	b   []byte
	pos int
}

func (c *canonScan) value(depth int) bool {
	if depth > canonicalDepth || c.pos >= len(c.b) {
		return false
	}
	switch ch := c.b[c.pos]; {
	case ch == '{':
		return c.object(depth)
	case ch == '[':
		return c.array(depth)
	case ch == '"':
		_, ok := c.str()
		return ok
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.integer()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	}
	return false
}

func (c *canonScan) literal(lit string) bool {
	if !bytes.HasPrefix(c.b[c.pos:], []byte(lit)) {
		return false
	}
	c.pos += len(lit)
	return true
}

// integer accepts -?(0|[1-9][0-9]*) of at most 15 digits, not "-0": the
// numbers JCS writes as their own literal. Fractions and exponents are
// left to AppendCanonical.
func (c *canonScan) integer() bool {
	neg := c.b[c.pos] == '-'
	if neg {
		c.pos++
	}
	start := c.pos
	for c.pos < len(c.b) && c.b[c.pos] >= '0' && c.b[c.pos] <= '9' {
		c.pos++
	}
	n := c.pos - start
	switch {
	case n == 0 || n > 15:
		return false
	case c.b[start] == '0' && (n > 1 || neg):
		return false
	}
	if c.pos < len(c.b) {
		switch c.b[c.pos] {
		case '.', 'e', 'E':
			return false
		}
	}
	return true
}

// str accepts a string without escapes or control characters whose bytes
// are valid UTF-8 — written as it is by JCS — and returns its contents.
// Parser.Str reads it: its result is a slice of the source exactly
// when the string had neither escapes nor invalid UTF-8 (otherwise it is
// a decoded copy).
func (c *canonScan) str() ([]byte, bool) {
	p := Parser{Src: c.b, Pos: c.pos}
	s, err := p.Str()
	if err != nil || (len(s) > 0 && &s[0] != &c.b[c.pos+1]) || len(s) != p.Pos-c.pos-2 {
		return nil, false
	}
	c.pos = p.Pos
	return s, true
}

// object accepts members in strictly increasing key order (so no
// duplicates). JCS orders keys by UTF-16 code units, which agrees with
// the byte order of UTF-8 except between characters from U+E000 up and
// those beyond U+FFFF; keys with a lead byte of either (0xEE and above)
// are left to AppendCanonical.
func (c *canonScan) object(depth int) bool {
	c.pos++ // '{'
	if c.pos < len(c.b) && c.b[c.pos] == '}' {
		c.pos++
		return true
	}
	var prev []byte
	for first := true; ; first = false {
		if c.pos >= len(c.b) || c.b[c.pos] != '"' {
			return false
		}
		key, ok := c.str()
		if !ok || !utf16Ordered(key) {
			return false
		}
		if !first && bytes.Compare(prev, key) >= 0 {
			return false
		}
		prev = key
		if c.pos >= len(c.b) || c.b[c.pos] != ':' {
			return false
		}
		c.pos++
		if !c.value(depth + 1) {
			return false
		}
		if c.pos >= len(c.b) {
			return false
		}
		switch c.b[c.pos] {
		case ',':
			c.pos++
		case '}':
			c.pos++
			return true
		default:
			return false
		}
	}
}

func (c *canonScan) array(depth int) bool {
	c.pos++ // '['
	if c.pos < len(c.b) && c.b[c.pos] == ']' {
		c.pos++
		return true
	}
	for {
		if !c.value(depth+1) || c.pos >= len(c.b) {
			return false
		}
		switch c.b[c.pos] {
		case ',':
			c.pos++
		case ']':
			c.pos++
			return true
		default:
			return false
		}
	}
}

// utf16Ordered reports whether key has no character from U+E000 up (no
// lead byte 0xEE or above; continuation bytes are below 0xC0).
func utf16Ordered(key []byte) bool {
	for _, ch := range key {
		if ch >= 0xEE {
			return false
		}
	}
	return true
}

// HasJCSForm reports whether the JSON text b, which must be valid JSON
// (json.Valid), has an RFC 8785 form: whether AppendCanonical(Mode{JCS:
// true}) of it succeeds. Not every JSON text has one: a number beyond an
// IEEE 754 double has no ES6 form, and nesting past maxDepth is refused.
// It writes nothing: a reader that keeps JSON it did not write (a
// connector's answer) asks it before putting that JSON in a record, which
// is hashed over that form (FuzzHasJCSForm holds it to AppendCanonical).
func HasJCSForm(b []byte) bool {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case c == '{' || c == '[':
			if depth++; depth > deepest {
				deepest = depth
			}
		case c == '}' || c == ']':
			depth--
		case c == '-' || c >= '0' && c <= '9':
			p := Parser{Src: b, Pos: i}
			lit, integer, err := p.ScanNumber()
			if err != nil {
				return false
			}
			if !shortInteger(lit, integer) {
				if _, err := strconv.ParseFloat(string(lit), 64); err != nil {
					return false
				}
			}
			i = p.Pos - 1
		}
	}
	if deepest > maxDepth {
		// Exactly what Value allows (a scalar at maxDepth is too deep,
		// an empty array there is not): rare enough to ask it.
		_, err := AppendCanonical(nil, b, Mode{JCS: true})
		return err == nil
	}
	return true
}
