package jcs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// canonicalSeeds are texts IsCanonical must accept (first group) and
// texts it must leave to AppendCanonical (second).
var canonicalSeeds = [][]byte{
	[]byte(`{"amount":1250,"currency":"EUR","order":"order-1042"}`), []byte(`{}`), []byte(`[]`),
	[]byte(`{"a":[1,-2,0,true,false,null,"x"],"b":{"c":{}}}`), []byte(`"é€"`), []byte(`{"noop":true}`),
	[]byte(`123456789012345`), []byte(`{"a":1,"ab":2,"b":3}`),

	[]byte(`{"b":1,"a":2}`), []byte(`{"a":1,"a":1}`), []byte(`{ "a":1}`), []byte(`[1, 2]`), []byte(`1.0`), []byte(`1e3`),
	[]byte(`-0`), []byte(`01`), []byte(`1234567890123456`), []byte(`"a\nb"`), []byte(`"\u00e9"`), []byte("\"\xff\""),
	[]byte(`{"\ue000":1,"😀":2}`), []byte(`{"😀":1,"\ue000":2}`), []byte(`{"a":1}x`), []byte(``), []byte(`nul`), []byte(`{"a":}`),
	[]byte("\"\x01\""), []byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`),
}

// TestIsCanonicalSeeds: the usual data and results are copied, not
// canonicalized again (otherwise the scan is pure cost).
func TestIsCanonicalSeeds(t *testing.T) {
	for i, b := range canonicalSeeds {
		if want := i < 8; IsCanonical(b) != want {
			t.Errorf("IsCanonical(%s) = %v, want %v", b, !want, want)
		}
	}
}

// TestCanonicalPrefix: the canonical value at the start of a text, and
// its length, whatever follows it; nothing when the value itself is not.
func TestCanonicalPrefix(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int
		ok bool
	}{
		{`{"a":1},"b":2}`, 7, true}, {`{"a":"x"}}`, 9, true}, {`[1]  `, 3, true}, {`{"a":1}`, 7, true},
		{`{"b":1,"a":2},`, 0, false}, {`{"a":1.5}`, 0, false}, {``, 0, false}, {`{"a":1`, 0, false},
	} {
		if n, ok := CanonicalPrefix([]byte(c.in)); n != c.n || ok != c.ok {
			t.Errorf("CanonicalPrefix(%s) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
	}
}

// FuzzIsCanonical: whatever IsCanonical accepts, AppendCanonical writes
// back byte for byte, so copying it writes what canonicalizing it would.
func FuzzIsCanonical(f *testing.F) {
	for _, b := range canonicalSeeds {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, ok := CanonicalPrefix(b); ok {
			if n == 0 || !IsCanonical(b[:n]) {
				t.Fatalf("CanonicalPrefix(%q) = %d, a prefix IsCanonical refuses", b, n)
			}
		}
		if !IsCanonical(b) {
			return
		}
		out, err := AppendCanonical(nil, b, Mode{JCS: true})
		if err != nil {
			t.Fatalf("IsCanonical accepted %q, AppendCanonical refused it: %v", b, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("IsCanonical accepted %q, AppendCanonical wrote %q", b, out)
		}
		// The v1 form too (CanonicalPrefix's promise to structuredFast).
		if v1, err := CanonicalV1(b, true); err != nil || !bytes.Equal(v1, b) {
			t.Fatalf("IsCanonical accepted %q, CanonicalV1 wrote %q (%v)", b, v1, err)
		}
	})
}

// FuzzHasJCSForm: on valid JSON, HasJCSForm says exactly whether
// AppendCanonical(Mode{JCS: true}) succeeds.
func FuzzHasJCSForm(f *testing.F) {
	for _, s := range canonSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(strings.Repeat("[", 513) + strings.Repeat("]", 513)))
	f.Add([]byte(strings.Repeat("[", 513) + "1" + strings.Repeat("]", 513)))
	f.Add([]byte(`{"a":[1.5e308,-1e-400,"1e400"],"b":-12345678901234567890}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			return
		}
		_, err := AppendCanonical(nil, in, Mode{JCS: true})
		if got := HasJCSForm(in); got != (err == nil) {
			t.Fatalf("HasJCSForm(%.80q) = %v, AppendCanonical: %v", in, got, err)
		}
	})
}
