package audit

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestIDStoreDoesNotCompact: the store's tables are never compacted
// (digests spread every table over the whole key space, so compactions
// rewrote everything for nothing), and every id written across many
// flushed tables is still found with its first use.
func TestIDStoreDoesNotCompact(t *testing.T) {
	st, err := openIDStore(t.TempDir(), 8*500)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.close(); err != nil {
			t.Error(err)
		}
	}()
	const tables, per = 8, 500
	for i := range tables {
		ids := map[digest]idSeen{}
		for j := range per {
			ids[digestOf(strconv.Itoa(i*per+j))] = idSeen{tuple: digestOf("t", strconv.Itoa(j)), at: src{int32(i), int64(j)}}
		}
		if err := st.add(ids); err != nil {
			t.Fatal(err)
		}
		// One L0 table per batch: twice the count that starts a
		// compaction by default.
		if err := st.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// A compaction would be scheduled right after the flushes.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n := st.db.Metrics().Compact.Count; n > 0 {
			t.Fatalf("the store compacted %d times", n)
		}
	}
	for i := range tables {
		for j := range per {
			got, ok, err := st.get(digestOf(strconv.Itoa(i*per + j)))
			if err != nil || !ok || got.at != (src{int32(i), int64(j)}) || got.tuple != digestOf("t", strconv.Itoa(j)) {
				t.Fatalf("id %d: %+v, %v, %v", i*per+j, got, ok, err)
			}
		}
	}
	if _, ok, err := st.get(digestOf("absent")); ok || err != nil {
		t.Fatalf("an id never added was found (%v)", err)
	}
}

// TestIDFilterSized: the id store's filter is sized for the outcomes the
// audit can read (16 bits each, at least 64 KiB, at most idFilterBits),
// and sized so, about 0.25 % of absent ids pass it once it is full.
func TestIDFilterSized(t *testing.T) {
	for _, c := range []struct {
		ids  int64
		bits int
	}{{0, 1 << 19}, {1000, 1 << 19}, {200_000, 1 << 22}, {1 << 30, idFilterBits}} {
		if got := idFilterBitsFor(c.ids); got != c.bits {
			t.Errorf("%d ids: filter of %d bits, want %d", c.ids, got, c.bits)
		}
	}
	st, err := openIDStore(t.TempDir(), 200_000)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.close(); err != nil {
			t.Error(err)
		}
	}()
	if got := len(st.seen) * 64; got != 1<<22 {
		t.Fatalf("store for 200 000 ids: filter of %d bits, want %d", got, 1<<22)
	}
	const n = 1 << 22 / 16 // full: 16 bits per id
	for i := range n {
		st.seen.add(digestOf(strconv.Itoa(i)))
	}
	const tries = 100_000
	fp := 0
	for i := range tries {
		if st.seen.maybeHas(digestOf(strconv.Itoa(n + i))) {
			fp++
		}
	}
	if rate := float64(fp) / tries; rate > 0.005 {
		t.Errorf("%.2f %% false positives with %d ids, want about 0.25 %%", 100*rate, n)
	}
}

// TestSortKeys: sortKeys puts ids in key order (as bytes.Compare orders
// their keys), every entry once, for sizes around the bucket counts.
func TestSortKeys(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 7, 8, 9, 1000, 4097} {
		var ks []sortKey
		for i := range n {
			d := digestOf(strconv.Itoa(n), strconv.Itoa(i))
			if i%10 == 3 && i > 0 {
				d = digestOf(strconv.Itoa(n), strconv.Itoa(i-1)) // equal hi and lo
			}
			ks = append(ks, sortKey{binary.BigEndian.Uint64(d[:8]), binary.BigEndian.Uint64(d[8:]), i})
		}
		got := sortKeys(slices.Clone(ks))
		if len(got) != n {
			t.Fatalf("%d keys: %d back", n, len(got))
		}
		seen := map[int]bool{}
		for j, k := range got {
			seen[k.i] = true
			if j == 0 {
				continue
			}
			var x, y [16]byte
			binary.BigEndian.PutUint64(x[:], got[j-1].hi)
			binary.BigEndian.PutUint64(x[8:], got[j-1].lo)
			binary.BigEndian.PutUint64(y[:], k.hi)
			binary.BigEndian.PutUint64(y[8:], k.lo)
			if bytes.Compare(x[:], y[:]) > 0 {
				t.Fatalf("%d keys: key %d (%x) after %x", n, j, y, x)
			}
		}
		if len(seen) != n {
			t.Fatalf("%d keys: %d distinct entries back", n, len(seen))
		}
	}
}

// craftedSortKeys is n ids that all share the top bits sortKeysCounted
// buckets by (as ids searched for a common digest prefix would), in
// descending order: one bucket of n, the insertion sort's worst case.
func craftedSortKeys(n int) []sortKey {
	ks := make([]sortKey, n)
	for i := range ks {
		d := digestOf("crafted", strconv.Itoa(i))
		ks[i] = sortKey{0xfedc_ba98_0000_0000 | uint64(n-i), binary.BigEndian.Uint64(d[8:]), i}
	}
	return ks
}

// TestSortKeysCrafted: ids crafted into one bucket are sorted by
// comparison, not by the insertion pass (quadratic in a bucket's size),
// and come back in key order, every entry once; the digests of ordinary
// ids never leave the insertion pass.
func TestSortKeysCrafted(t *testing.T) {
	const n = 20_000
	ks := craftedSortKeys(n)
	want := slices.Clone(ks)
	slices.SortFunc(want, compareSortKeys)
	got, large := sortKeysCounted(slices.Clone(ks))
	if large != 1 {
		t.Errorf("%d crafted ids in one bucket: %d buckets sorted by comparison, want 1", n, large)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%d crafted ids: not in key order", n)
	}
	var ordinary []sortKey
	for i := range n {
		d := digestOf("ordinary", strconv.Itoa(i))
		ordinary = append(ordinary, sortKey{binary.BigEndian.Uint64(d[:8]), binary.BigEndian.Uint64(d[8:]), i})
	}
	want = slices.Clone(ordinary)
	slices.SortFunc(want, compareSortKeys)
	got, large = sortKeysCounted(ordinary)
	if large != 0 {
		t.Errorf("%d ordinary ids: %d buckets sorted by comparison, want none", n, large)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%d ordinary ids: not in key order", n)
	}
}

// BenchmarkSortKeys: sortKeys of a partition's worth of ordinary ids
// (digests) and of as many crafted into one bucket.
func BenchmarkSortKeys(b *testing.B) {
	const n = 16_667
	ordinary := make([]sortKey, n)
	for i := range ordinary {
		d := digestOf("ordinary", strconv.Itoa(i))
		ordinary[i] = sortKey{binary.BigEndian.Uint64(d[:8]), binary.BigEndian.Uint64(d[8:]), i}
	}
	for _, c := range []struct {
		name string
		ks   []sortKey
	}{{"ordinary", ordinary}, {"crafted", craftedSortKeys(n)}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				sortKeys(c.ks)
			}
		})
	}
}
