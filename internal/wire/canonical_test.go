package wire

import (
	"bytes"
	"testing"

	"github.com/onceflight/onceflight/internal/jcs"
)

// canonicalSeeds are texts asCanonical must accept (first group) and
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

// TestAsCanonicalSeeds: the usual data and results are copied, not
// canonicalized again (otherwise the scan is pure cost).
func TestAsCanonicalSeeds(t *testing.T) {
	for i, b := range canonicalSeeds {
		if want := i < 8; asCanonical(b) != want {
			t.Errorf("asCanonical(%s) = %v, want %v", b, !want, want)
		}
	}
}

// FuzzAsCanonical: whatever asCanonical accepts, AppendCanonical writes
// back byte for byte, so copying it writes what canonicalizing it would.
func FuzzAsCanonical(f *testing.F) {
	for _, b := range canonicalSeeds {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !asCanonical(b) {
			return
		}
		out, err := jcs.AppendCanonical(nil, b, jcs.Mode{JCS: true})
		if err != nil {
			t.Fatalf("asCanonical accepted %q, AppendCanonical refused it: %v", b, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("asCanonical accepted %q, AppendCanonical wrote %q", b, out)
		}
	})
}
