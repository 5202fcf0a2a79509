package wire

import (
	"bytes"
	"testing"
)

// TestIsSealed: IsSealed accepts exactly what SealRecord writes for the
// record, and gives its hash member's value; a change to any one byte of
// those bytes (the record kept) is refused, whatever the scratch buffer
// held before; and it allocates nothing once the scratch buffer is
// large enough.
func TestIsSealed(t *testing.T) {
	scratch := bytes.Repeat([]byte("x"), 4096)
	for _, rec := range goldenJournal(t) {
		r := rec
		raw, err := SealRecord(&r)
		if err != nil {
			t.Fatal(err)
		}
		var h []byte
		var ok bool
		if scratch, h, ok = IsSealed(scratch, &rec, raw); !ok || string(h) != r.Hash {
			t.Fatalf("%s: IsSealed of its sealed bytes = %q, %v; want %q, true", rec.IdempotencyKey, h, ok, r.Hash)
		}
		changed := bytes.Clone(raw)
		for i := range changed {
			changed[i] ^= 0x01
			if scratch, _, ok = IsSealed(scratch, &rec, changed); ok {
				t.Fatalf("%s: accepted with byte %d changed:\n%s", rec.IdempotencyKey, i, changed)
			}
			changed[i] = raw[i]
		}
		for _, b := range [][]byte{raw[:len(raw)-1], append(bytes.Clone(raw), ' ')} {
			if scratch, _, ok = IsSealed(scratch, &rec, b); ok {
				t.Fatalf("%s: accepted %d bytes for %d", rec.IdempotencyKey, len(b), len(raw))
			}
		}
		if n := testing.AllocsPerRun(20, func() { scratch, _, _ = IsSealed(scratch, &rec, raw) }); n > 0 {
			t.Errorf("%s: %.0f allocations per IsSealed, want none", rec.IdempotencyKey, n)
		}
	}
}
