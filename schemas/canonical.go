package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// maxDepth bounds JSON nesting so hostile input cannot drive deep recursion.
const maxDepth = 512

// fingerprintDomain separates command fingerprints from any other SHA-256 we
// compute, and lets the scheme be versioned if it ever has to change.
const fingerprintDomain = "onceflight/fingerprint/v1"

func jsonValid(b []byte) bool { return json.Valid(b) }

// CanonicalJSON returns one canonical text for a JSON value, so that two
// encodings of the same value (key order, whitespace, escapes) hash alike:
// object keys sorted by byte order of their UTF-8, no insignificant
// whitespace, strings re-escaped minimally (only '"', '\\' and control
// characters), numbers kept as their literal text (1.0 and 1 differ: we do
// not guess the sender's numeric semantics). Duplicate object keys are an
// error: which one a consumer would see is ambiguous. Trailing data after the
// value is an error.
func CanonicalJSON(raw []byte) ([]byte, error) {
	return canonical(raw, true)
}

// canonical implements CanonicalJSON; with strict false a duplicate key keeps
// its last value (encoding/json's rule), for hashing data we did not accept
// ourselves (connector results) where failing is worse than choosing.
func canonical(raw []byte, strict bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	c := canonicalizer{dec: dec, strict: strict, out: make([]byte, 0, len(raw))}
	if err := c.value(0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, errors.New("trailing data after JSON value")
		}
		return nil, fmt.Errorf("trailing data after JSON value: %w", err)
	}
	return c.out, nil
}

type canonicalizer struct {
	dec    *json.Decoder
	strict bool
	out    []byte
}

func (c *canonicalizer) value(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("JSON nested deeper than %d", maxDepth)
	}
	tok, err := c.dec.Token()
	if err != nil {
		if err == io.EOF {
			return errors.New("unexpected end of JSON")
		}
		return err
	}
	return c.token(tok, depth)
}

func (c *canonicalizer) token(tok json.Token, depth int) error {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return c.object(depth)
		case '[':
			return c.array(depth)
		}
		return fmt.Errorf("unexpected %q", t)
	case string:
		c.out = appendString(c.out, t)
	case json.Number:
		c.out = append(c.out, t...)
	case bool:
		if t {
			c.out = append(c.out, "true"...)
		} else {
			c.out = append(c.out, "false"...)
		}
	case nil:
		c.out = append(c.out, "null"...)
	default:
		return fmt.Errorf("unexpected token %v", tok)
	}
	return nil
}

type member struct {
	key string
	val []byte
}

func (c *canonicalizer) object(depth int) error {
	var members []member
	outer := c.out
	for c.dec.More() {
		tok, err := c.dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("object key is %T, not a string", tok)
		}
		c.out = nil
		if err := c.value(depth + 1); err != nil {
			return err
		}
		members = append(members, member{key: key, val: c.out})
	}
	if _, err := c.dec.Token(); err != nil { // '}'
		return err
	}
	// Stable sort keeps duplicate keys in input order, so "last wins" below
	// matches encoding/json.
	slices.SortStableFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	c.out = append(outer, '{')
	first := true
	for i, m := range members {
		if i+1 < len(members) && members[i+1].key == m.key {
			if c.strict {
				return fmt.Errorf("duplicate object key %q", m.key)
			}
			continue
		}
		if !first {
			c.out = append(c.out, ',')
		}
		first = false
		c.out = appendString(c.out, m.key)
		c.out = append(c.out, ':')
		c.out = append(c.out, m.val...)
	}
	c.out = append(c.out, '}')
	return nil
}

func (c *canonicalizer) array(depth int) error {
	c.out = append(c.out, '[')
	first := true
	for c.dec.More() {
		if !first {
			c.out = append(c.out, ',')
		}
		first = false
		if err := c.value(depth + 1); err != nil {
			return err
		}
	}
	if _, err := c.dec.Token(); err != nil { // ']'
		return err
	}
	c.out = append(c.out, ']')
	return nil
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string with minimal escaping. s is valid
// UTF-8 (encoding/json replaces invalid bytes with U+FFFD when decoding).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		ch := s[i]
		if ch >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			b = utf8.AppendRune(b, r)
			i += size
			continue
		}
		switch {
		case ch == '"':
			b = append(b, '\\', '"')
		case ch == '\\':
			b = append(b, '\\', '\\')
		case ch == '\n':
			b = append(b, '\\', 'n')
		case ch == '\r':
			b = append(b, '\\', 'r')
		case ch == '\t':
			b = append(b, '\\', 't')
		case ch < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[ch>>4], hexDigits[ch&0xf])
		default:
			b = append(b, ch)
		}
		i++
	}
	return append(b, '"')
}

// Fingerprint is the command fingerprint of SPEC §2: "sha256:" + hex of
// SHA-256 over type, subject and the canonical JSON of data. Each part is
// length-prefixed (8-byte big-endian) after a domain tag, so no two different
// (type, subject, data) triples frame to the same bytes. Absent data (nil or
// empty) frames as zero bytes and so differs from an empty object {}.
func Fingerprint(typ, subject string, data json.RawMessage) (string, error) {
	var canon []byte
	if len(data) > 0 {
		var err error
		if canon, err = CanonicalJSON(data); err != nil {
			return "", fmt.Errorf("canonicalize data: %w", err)
		}
	}
	return fingerprintCanonical(typ, subject, canon), nil
}

func fingerprintCanonical(typ, subject string, canon []byte) string {
	h := sha256.New()
	writeFramed(h, []byte(fingerprintDomain))
	writeFramed(h, []byte(typ))
	writeFramed(h, []byte(subject))
	writeFramed(h, canon)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// writeFramed writes len(b) as 8 bytes big-endian, then b.
func writeFramed(w io.Writer, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	w.Write(n[:])
	w.Write(b)
}
