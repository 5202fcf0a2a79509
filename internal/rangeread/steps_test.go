package rangeread

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stepsHooks records what the Steps' clients buffer and how many
// clients are made.
type stepsHooks struct {
	mu       sync.Mutex
	clients  int
	buffered []*kgo.Record // in the order the clients buffered them
}

func (h *stepsHooks) OnNewClient(*kgo.Client) {
	h.mu.Lock()
	h.clients++
	h.mu.Unlock()
}

func (h *stepsHooks) OnFetchRecordBuffered(r *kgo.Record) {
	h.mu.Lock()
	h.buffered = append(h.buffered, r)
	h.mu.Unlock()
}

// TestStepsReadAheadBounded: Steps reads each set in offset order through
// two clients whatever the number of sets, starts fetching a set only
// once the set before it has at most aheadOffsets offsets left to fetch,
// and reads at most one fetch of it before its Each.
func TestStepsReadAheadBounded(t *testing.T) {
	const (
		parts    = 5
		perPart  = 120
		maxBytes = 1024 // a few records a fetch and partition
		ahead    = 20
	)
	old := aheadOffsets
	aheadOffsets = ahead
	t.Cleanup(func() { aheadOffsets = old })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	val := []byte(strings.Repeat("v", 100))
	for p := range int32(parts) {
		for i := range perPart {
			// One batch a record, so that a fetch of maxBytes
			// holds several batches and a set takes many fetches.
			r := &kgo.Record{Topic: "t", Partition: p, Key: fmt.Appendf(nil, "%d-%d", p, i), Value: val}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	h := &stepsHooks{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(h),
		kgo.FetchMaxPartitionBytes(maxBytes), kgo.FetchMaxBytes(maxBytes))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	h.mu.Lock()
	h.clients = 0 // cl's own
	h.mu.Unlock()

	// Set i reads partition i, from offset 10; an empty set between the
	// first two is skipped.
	var sets []map[string]map[int32][2]int64
	for p := range int32(parts) {
		sets = append(sets, map[string]map[int32][2]int64{"t": {p: {10, perPart}}})
		if p == 0 {
			sets = append(sets, map[string]map[int32][2]int64{})
		}
	}
	setOf := func(p int32) int { return int(p) } // the non-empty sets, in order
	s, err := OpenSteps(cl, sets)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	for i := range sets {
		h.mu.Lock()
		before := len(h.buffered)
		h.mu.Unlock()
		var got []int64
		var part int32 = -1
		err := s.Each(ctx, func(rs []*kgo.Record) {
			for _, r := range rs {
				got = append(got, r.Offset)
				part = r.Partition
			}
			// Slow checks: a client that fetched ahead without
			// a bound would have time to.
			time.Sleep(2 * time.Millisecond)
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(sets[i]) == 0 {
			if len(got) > 0 {
				t.Fatalf("set %d is empty but Each gave %d records", i, len(got))
			}
			continue
		}
		if len(got) != perPart-10 || got[0] != 10 || got[len(got)-1] != perPart-1 {
			t.Fatalf("set %d: %d records, offsets %d..%d, want %d..%d", i, len(got), got[0], got[len(got)-1], 10, perPart-1)
		}
		for j := 1; j < len(got); j++ {
			if got[j] != got[j-1]+1 {
				t.Fatalf("set %d: offset %d after %d", i, got[j], got[j-1])
			}
		}
		// What the next set's client had buffered when this set's Each
		// started: one fetch at most.
		h.mu.Lock()
		ahead := 0
		for _, r := range h.buffered[:before] {
			if setOf(r.Partition) == setOf(part) {
				ahead += len(r.Key) + len(r.Value)
			}
		}
		h.mu.Unlock()
		if ahead > 2*maxBytes {
			t.Errorf("set %d: %d bytes of it were buffered before its Each, want at most one fetch (%d)", i, ahead, maxBytes)
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.clients != 2 {
		t.Errorf("%d clients for %d sets, want 2", h.clients, len(sets))
	}
	// A partition's first record is buffered only once the partition
	// before it has at most aheadOffsets offsets left to fetch (with a
	// fetch's slack: left is counted as its fetches are polled).
	fetched := map[int32]int64{} // partition -> highest offset buffered
	for _, r := range h.buffered {
		if _, ok := fetched[r.Partition]; !ok && r.Partition > 0 {
			prev := fetched[r.Partition-1]
			if left := int64(perPart-1) - prev; left > ahead {
				t.Errorf("partition %d's first record was buffered with %d offsets of partition %d left to fetch, want at most %d",
					r.Partition, left, r.Partition-1, ahead)
			}
		}
		fetched[r.Partition] = max(fetched[r.Partition], r.Offset)
	}
}
