package jcs

import (
	"strings"
	"testing"
)

// plainRunRef is plainRun a byte at a time.
func plainRunRef(s []byte) int {
	for i, c := range s {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
	}
	return len(s)
}

// TestPlainRun: every byte value, at every position of strings of up to
// three words, stops the run exactly where the byte-at-a-time rule does,
// for []byte and string alike.
func TestPlainRun(t *testing.T) {
	for n := 0; n <= 24; n++ {
		for at := 0; at < n; at++ {
			for c := 0; c < 256; c++ {
				s := []byte(strings.Repeat("a~ Z", 6)[:n])
				s[at] = byte(c)
				want := plainRunRef(s)
				if got := plainRun(s); got != want {
					t.Fatalf("plainRun(%q) = %d, want %d", s, got, want)
				}
				if got := plainRun(string(s)); got != want {
					t.Fatalf("plainRun(string %q) = %d, want %d", s, got, want)
				}
			}
		}
	}
}

// FuzzPlainRun: the same for any bytes.
func FuzzPlainRun(f *testing.F) {
	f.Add([]byte(`abcdefgh"ijklmnop`))
	f.Add([]byte("0123456789abcdef\x1f"))
	f.Add([]byte("\u00e9\u2028 plain ASCII \\ after"))
	f.Fuzz(func(t *testing.T, s []byte) {
		if got, want := plainRun(s), plainRunRef(s); got != want {
			t.Fatalf("plainRun(%q) = %d, want %d", s, got, want)
		}
	})
}

// BenchmarkPlainRun is plainRun over a record's longer plain strings
// (a 180-byte data member, a hash).
func BenchmarkPlainRun(b *testing.B) {
	s := []byte(strings.Repeat("x", 180) + `"`)
	h := []byte("sha256:90ec21ce4de9d8579268d143f469f89eb3ddb2c132ef66577906bea4b5bf4c49\"")
	n := 0
	for b.Loop() {
		n += plainRun(s) + plainRun(h)
	}
	if n == 0 {
		b.Fatal(n)
	}
}
