package dedupe

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestSortedOrdersLikeBytesCompare: tableEntries.sorted, which sorts by
// kind and by abbreviated keys, orders any set of distinct keys exactly as
// bytes.Compare does — keys of one kind sharing long prefixes, keys that
// differ only past 8 bytes after the shared prefix, prefixes of other
// keys, zero bytes, the empty key — and still refuses a key written twice.
func TestSortedOrdersLikeBytesCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		seen := map[string]bool{}
		var tab tableEntries
		add := func(k string) {
			if !seen[k] {
				seen[k] = true
				_ = tab.Set([]byte(k), nil, nil)
			}
		}
		if round%3 == 0 {
			add("")
		}
		prefixes := []string{"r/", "s/succeeded/", "f/1796529600000000000/", "e/", "x/", "\x00", "\x00\x00", "\xff"}
		for range 1 + rng.IntN(300) {
			p := prefixes[rng.IntN(len(prefixes))]
			var b strings.Builder
			b.WriteString(p)
			for range rng.IntN(20) {
				b.WriteByte("ab\x00\xff0123"[rng.IntN(8)])
			}
			add(b.String())
			if rng.IntN(4) == 0 {
				add(p + strings.Repeat("z", 9) + fmt.Sprint(rng.IntN(3)))
			}
		}
		got, err := tab.sorted()
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Sorted(func(yield func(string) bool) {
			for k := range seen {
				if !yield(k) {
					return
				}
			}
		})
		if len(got) != len(want) {
			t.Fatalf("round %d: %d entries sorted, want %d", round, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].key, []byte(want[i])) {
				t.Fatalf("round %d: entry %d is %q, want %q", round, i, got[i].key, want[i])
			}
		}
	}
	var tab tableEntries
	for _, k := range []string{"r/a", "s/x", "r/a"} {
		_ = tab.Set([]byte(k), nil, nil)
	}
	if _, err := tab.sorted(); err == nil || !strings.Contains(err.Error(), "written twice") {
		t.Fatalf("a key written twice: err = %v", err)
	}
}
