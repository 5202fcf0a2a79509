package trustlog

import (
	"fmt"
	"testing"

	"github.com/onceflight/onceflight/trust"
)

// BenchmarkTreeAppend is an executor's cost per journal record: the leaf
// hash of a 600-byte record and its append to the compact range. It
// reports the memory of the range (hashes only) after b.N leaves.
//
//	go test ./internal/trustlog -run '^$' -bench TreeAppend -benchtime 1000000x
func BenchmarkTreeAppend(b *testing.B) {
	value := make([]byte, 600)
	t := NewTree()
	b.ResetTimer()
	for i := range b.N {
		t.Append(trust.LeafHash(trust.LeafData(fmt.Appendf(nil, "k-%d", i), value, []trust.Header{{Key: "onceflight-kind", Value: "record"}, {Key: "onceflight-epoch", Value: "7"}})))
	}
	b.StopTimer()
	b.ReportMetric(float64(32*len(t.Hashes())), "range-bytes")
}

// The compact range's size at tree sizes up to 2^40: one hash per set bit.
func TestCompactRangeMemory(t *testing.T) {
	for _, n := range []uint64{1, 1000, 1 << 20, 1_000_000_000, 1<<40 - 1} {
		hs := make([][]byte, 0, 64)
		for range bitsSet(n) {
			hs = append(hs, make([]byte, 32))
		}
		tr, err := ResumeTree(n, hs)
		if err != nil {
			t.Fatalf("size %d: %v", n, err)
		}
		if got := len(tr.Hashes()); got > 40 {
			t.Fatalf("size %d: %d hashes", n, got)
		}
		t.Logf("tree of %d leaves: %d hashes, %d bytes", n, len(hs), 32*len(hs))
	}
}

func bitsSet(n uint64) int {
	c := 0
	for ; n > 0; n &= n - 1 {
		c++
	}
	return c
}
