package consumer_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestOffsetCommitOnlyMoved: a transaction's TxnOffsetCommit carries the
// partitions whose watermark moved since this ownership last committed
// it, not every owned partition's. Commands answered one at a time on one
// entity then commit one partition each in their answer's transaction;
// they used to commit all of them
// (BENCHMARKS.md, "Round 16 (latency)").
func TestOffsetCommitOnlyMoved(t *testing.T) {
	h, c := newClusterHarness(t)
	var (
		mu      sync.Mutex
		commits [][]int32 // partitions of each TxnOffsetCommit, in order
	)
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		var ps []int32
		for _, rt := range req.(*kmsg.TxnOffsetCommitRequest).Topics {
			for _, rp := range rt.Partitions {
				ps = append(ps, rp.Partition)
			}
		}
		mu.Lock()
		commits = append(commits, ps)
		mu.Unlock()
		return nil, nil, false
	})
	a := h.StartNode("A", t.TempDir(), onceflighttest.NodeOptions{})
	defer func() {
		if err := a.Stop(); err != nil {
			t.Errorf("A: %v", err)
		}
	}()
	onceflighttest.WaitFor(t, 20*time.Second, "A owns every partition", func() bool { return a.Owns(onceflighttest.Partitions) })
	seen := map[string][]schemas.Outcome{}
	// Commands on many entities, one at a time, reach every partition.
	for i := range 12 {
		h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("k%d", i), `{}`)
		h.Outcomes(len(seen)+1, seen, nil)
	}
	mu.Lock()
	widest := 0
	for _, ps := range commits {
		widest = max(widest, len(ps))
	}
	mu.Unlock()
	if widest != onceflighttest.Partitions {
		t.Fatalf("no offset commit of all %d partitions (widest %d): the commands did not reach every partition", onceflighttest.Partitions, widest)
	}
	// Now every partition has a watermark: a command's answer moves its
	// own partition's alone. (Its intent's transaction, before it, moves
	// none and commits every partition's: the fence.)
	for i := range 4 {
		mu.Lock()
		n0 := len(commits)
		mu.Unlock()
		h.Submit(fmt.Sprintf("again-%d", i), "order-1", fmt.Sprintf("again-%d", i), `{}`)
		h.Outcomes(len(seen)+1, seen, nil)
		mu.Lock()
		got := commits[n0:]
		mu.Unlock()
		if len(got) == 0 || len(got[len(got)-1]) != 1 {
			t.Fatalf("command again-%d: offset commits %v, want the answer's of one partition", i, got)
		}
	}
	h.Audit()
}
