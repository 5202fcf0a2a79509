package jcs

// The canonicalizer of round 1 (encoding/json's Decoder.Token), kept as the
// reference the byte-level parser must match exactly in v1 mode: stored
// fingerprints are compared with new ones forever.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// canonicalReference is CanonicalV1 as round 1 computed it; with strict false a duplicate key keeps
// its last value (encoding/json's rule), for hashing data we did not accept
// ourselves (connector results) where failing is worse than choosing.
func canonicalReference(raw []byte, strict bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	c := refCanonicalizer{dec: dec, strict: strict, out: make([]byte, 0, len(raw))}
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

type refCanonicalizer struct {
	dec    *json.Decoder
	strict bool
	out    []byte
}

func (c *refCanonicalizer) value(depth int) error {
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

func (c *refCanonicalizer) token(tok json.Token, depth int) error {
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
		c.out = refAppendString(c.out, t)
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

type refMember struct {
	key string
	val []byte
}

func (c *refCanonicalizer) object(depth int) error {
	var members []refMember
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
		members = append(members, refMember{key: key, val: c.out})
	}
	if _, err := c.dec.Token(); err != nil { // '}'
		return err
	}
	// Stable sort keeps duplicate keys in input order, so "last wins" below
	// matches encoding/json.
	slices.SortStableFunc(members, func(a, b refMember) int { return strings.Compare(a.key, b.key) })
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
		c.out = refAppendString(c.out, m.key)
		c.out = append(c.out, ':')
		c.out = append(c.out, m.val...)
	}
	c.out = append(c.out, '}')
	return nil
}

func (c *refCanonicalizer) array(depth int) error {
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

// appendString writes s as a JSON string with minimal escaping. s is valid
// UTF-8 (encoding/json replaces invalid bytes with U+FFFD when decoding).
func refAppendString(b []byte, s string) []byte {
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
