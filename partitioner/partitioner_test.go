package partitioner

import (
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMurmur2KafkaVectors checks the hash against the vectors from Kafka's
// UtilsTest.testMurmur2, as copied into franz-go's
// pkg/kgo/partitioner_test.go (TestMurmur2KafkaVectors, Copyright 2020,
// Travis Bischel, BSD-3-Clause).
func TestMurmur2KafkaVectors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := murmur2([]byte(c.in)); got != c.want {
			t.Errorf("murmur2(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// kgoPartition asks franz-go's default keyed partitioner, which mirrors the
// Java client, where a record with this key goes.
func kgoPartition(key []byte, n int) int32 {
	if key == nil {
		key = []byte{} // kgo treats a nil key as keyless (sticky random)
	}
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	return int32(tp.Partition(&kgo.Record{Key: key}, n))
}

func TestForKeyMatchesKgo(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		key := make([]byte, rng.IntN(64))
		for j := range key {
			key[j] = byte(rng.UintN(256))
		}
		n := 1 + rng.IntN(256)
		if got, want := ForKey(key, n), kgoPartition(key, n); got != want {
			t.Fatalf("ForKey(%x, %d) = %d, kgo chose %d", key, n, got, want)
		}
	}
}

func TestForEntity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		entity string
		n      int
	}{
		{"order-1042", 1}, {"order-1042", 3}, {"order-1042", 12},
		{"", 7}, {"customer/ä", 5}, {"foobar", 2147483647},
	} {
		got := ForEntity(c.entity, c.n)
		if want := kgoPartition([]byte(c.entity), c.n); got != want {
			t.Errorf("ForEntity(%q, %d) = %d, kgo chose %d", c.entity, c.n, got, want)
		}
		if got < 0 || int(got) >= c.n {
			t.Errorf("ForEntity(%q, %d) = %d out of range", c.entity, c.n, got)
		}
	}
	// One partition: everything on 0.
	if got := ForEntity("anything", 1); got != 0 {
		t.Errorf("ForEntity with 1 partition = %d", got)
	}
	// "foobar" hashes negative (-790332482); masking, not abs, decides.
	if got, want := ForKey([]byte("foobar"), 1<<30), int32((-790332482&0x7fffffff)%(1<<30)); got != want {
		t.Errorf("ForKey(foobar) = %d, want %d", got, want)
	}
}

func TestForKeyPanicsOnNoPartitions(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ForKey(_, %d) did not panic", n)
				}
			}()
			ForKey([]byte("k"), n)
		}()
	}
}

func FuzzForKey(f *testing.F) {
	f.Add([]byte("order-1042"), 12)
	f.Add([]byte{}, 1)
	f.Add([]byte("abc"), 7)
	f.Add([]byte("a-little-bit-longer-string"), 2147483647)
	f.Fuzz(func(t *testing.T, key []byte, n int) {
		if n < 1 {
			return
		}
		if got, want := ForKey(key, n), kgoPartition(key, n); got != want {
			t.Fatalf("ForKey(%x, %d) = %d, kgo chose %d", key, n, got, want)
		}
	})
}

func BenchmarkForEntity(b *testing.B) {
	for b.Loop() {
		ForEntity("order-1042", 12)
	}
}
