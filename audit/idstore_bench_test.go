package audit

import (
	"encoding/binary"
	"testing"
)

// BenchmarkIDStore is the outcome id store's work in an audit of the
// bench's topics (200 000 outcomes over 12 partitions): each partition's
// new ids looked up, then written when the partition ends; open and
// close included. Process CPU per id: Pebble flushes on its own
// goroutines.
func BenchmarkIDStore(b *testing.B) {
	const parts, per = 12, 200_000 / 12
	batches := make([]map[digest]idSeen, parts)
	for p := range batches {
		batches[p] = make(map[digest]idSeen, per)
		for i := range per {
			var k [8]byte
			binary.BigEndian.PutUint64(k[:], uint64(p*per+i))
			batches[p][digestOf(string(k[:]))] = idSeen{tuple: digestOf("t", string(k[:])), at: src{int32(p), int64(i)}}
		}
	}
	dir := b.TempDir()
	cpu0 := processCPU(b)
	for b.Loop() {
		st, err := openIDStore(dir, parts*per)
		if err != nil {
			b.Fatal(err)
		}
		for _, ids := range batches {
			for id := range ids {
				if _, dup, err := st.get(id); err != nil || dup {
					b.Fatalf("get: %v, %v", dup, err)
				}
			}
			if err := st.add(ids); err != nil {
				b.Fatal(err)
			}
		}
		if err := st.close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N*parts*per), "cpu-ns/id")
}
