package jcs

import (
	"bytes"
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

// FuzzIsCanonical: whatever IsCanonical accepts, AppendCanonical writes
// back byte for byte, so copying it writes what canonicalizing it would.
func FuzzIsCanonical(f *testing.F) {
	for _, b := range canonicalSeeds {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
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
	})
}
