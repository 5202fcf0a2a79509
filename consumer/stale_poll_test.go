package consumer_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A record polled under one ownership of its partition and dispatched
// after that ownership ended and a new one began (the partition revoked,
// assigned to this process again and restored while the poll was still
// being dispatched) belongs to the old ownership. The new one fetches
// from its committed offset; had it tracked the stale record, that
// offset would have become its first, and the offsets below it would
// never hold its watermark back.
func TestStaleRecordNotDispatchedToNewOwnership(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "e1", "k1", `{"n":1}`)
	h.Outcomes(1, seen, nil)

	var mu sync.Mutex
	swapped := int32(-1)
	t.Cleanup(consumer.SetPollHook(func(recs []*kgo.Record) {
		mu.Lock()
		defer mu.Unlock()
		if swapped >= 0 || len(recs) == 0 {
			return
		}
		// Between the poll and its dispatch: the partition's ownership
		// ends and a new one, restored, takes its place.
		if !h.Ex.Reassign(recs[0].Partition) {
			t.Errorf("partition %d not owned", recs[0].Partition)
		}
		swapped = recs[0].Partition
	}))
	h.Submit("c2", "e1", "k2", `{"n":2}`)
	onceflighttest.WaitFor(t, 30*time.Second, "the poll of c2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return swapped >= 0
	})
	mu.Lock()
	p := swapped
	mu.Unlock()
	// A later poll, of another partition, answered: the poll loop is past
	// c2's poll.
	other := ""
	for i := 0; other == ""; i++ {
		if e := fmt.Sprintf("x%d", i); partitioner.ForEntity(e, onceflighttest.Partitions) != p {
			other = e
		}
	}
	h.Submit("c3", other, "k3", `{"n":3}`)
	h.Outcomes(2, seen, nil)
	if off := h.Ex.SeenOffset(p); off != -1 {
		t.Fatalf("the new ownership of partition %d tracked offset %d, a record polled under the old one", p, off)
	}
	if len(seen["c2"]) != 0 {
		t.Fatalf("c2, polled under the ended ownership, was answered: %+v", seen["c2"])
	}
}
