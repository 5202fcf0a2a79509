package consumer_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// A command polled under a new ownership of its partition, for an entity
// whose worker still runs a command of the ownership that ended (a lost
// session's execution outlasting the rejoin and restore, or a revoke's
// drain that timed out), must still be answered under the new ownership.
// Queued behind the old worker, it was dropped with the old ownership's
// queue: the new ownership had tracked its offset, so its watermark stayed
// below it and the command was answered by nobody until the next
// rebalance or restart (the partition's committed offset stuck).
func TestCommandQueuedBehindEndedOwnershipIsAnswered(t *testing.T) {
	h := onceflighttest.New(t)
	entered, free := holdEntityRead(t, "held")
	// c1's worker is held; its partition's ownership ends and a new one,
	// restored, takes its place.
	_, seen := reassignWhileHeld(t, h, entered)
	h.Submit("c2", "held", "k2", `{}`)
	onceflighttest.WaitFor(t, 30*time.Second, "c2 dispatched while c1 runs", func() bool { return h.Ex.Buffered() == 2 })
	free()
	// c1 belonged to the ended ownership (its answer is dropped, and
	// Reassign does not rewind the fetch): only c2 is answered.
	h.Outcomes(2, seen, nil)
	if o := seen["c2"]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("c2: %+v", o)
	}
	if o := seen["c1"]; len(o) != 0 {
		t.Fatalf("c1, of the ended ownership, was answered: %+v", o)
	}
}

// A later ownership's queue that grows hot while it waits behind the old
// worker reads past the entity's commands (skip.go) like any queue: when
// it becomes the entity's queue, its worker refills them under its own
// ownership, in order, and every one is answered once.
func TestHotQueueOfLaterOwnershipIsRefilled(t *testing.T) {
	h := onceflighttest.New(t)
	h.Tune = func(c *consumer.Config) { c.MaxBufferedPerEntity = 2 }
	h.Reg = prometheus.NewRegistry()
	entered, free := holdEntityRead(t, "held")
	p, seen := reassignWhileHeld(t, h, entered)
	const n = 7 // c2..c8: two queued behind c1's worker, five read past
	for i := 2; i < 2+n; i++ {
		h.Submit(fmt.Sprintf("c%d", i), "held", fmt.Sprintf("k%d", i), `{}`)
	}
	onceflighttest.WaitFor(t, 30*time.Second, "the later commands dispatched or read past", func() bool {
		return h.Ex.SeenOffset(p) >= int64(n+1) // c1..c8 and the partition's earlier records, if any
	})
	free()
	h.Outcomes(1+n, seen, nil)
	for i := 2; i < 2+n; i++ {
		if o := seen[fmt.Sprintf("c%d", i)]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
			t.Fatalf("c%d: %+v", i, o)
		}
	}
	var keys []string
	for _, r := range h.JournalAll() {
		if r.Entity == "held" && r.Status == schemas.StatusSucceeded {
			keys = append(keys, r.IdempotencyKey)
		}
	}
	want := []string{"k2", "k3", "k4", "k5", "k6", "k7", "k8"}
	if !slices.Equal(keys, want) {
		t.Fatalf("journal of held: %v, want %v (in order, each once)", keys, want)
	}
	onceflighttest.WaitFor(t, 30*time.Second, "nothing left buffered", func() bool { return h.Ex.Buffered() == 0 })
	if sk := peak(t, h.Reg, "skipped_commands"); sk < n-2 {
		t.Fatalf("peak skipped commands %.0f, want at least %d: the later queue was not read past", sk, n-2)
	}
}

// A later ownership that itself ends while its queue waits behind the old
// worker: its queue is dropped in turn (its partition's next owner reads
// those commands again), and the ownership after it still runs.
func TestLaterOwnershipEndedWhileItsQueueWaits(t *testing.T) {
	h := onceflighttest.New(t)
	entered, free := holdEntityRead(t, "held")
	p, seen := reassignWhileHeld(t, h, entered)
	h.Submit("c2", "held", "k2", `{}`)
	onceflighttest.WaitFor(t, 30*time.Second, "c2 dispatched while c1 runs", func() bool { return h.Ex.Buffered() == 2 })
	if !h.Ex.Reassign(p) { // c2's ownership ends before c2 could run
		t.Fatalf("partition %d not owned", p)
	}
	h.Submit("c3", "held", "k3", `{}`)
	onceflighttest.WaitFor(t, 30*time.Second, "c3 dispatched while c1 runs", func() bool { return h.Ex.Buffered() == 3 })
	free()
	// c1 and c2 belonged to ended ownerships (Reassign does not rewind
	// the fetch, as a real assignment's restore would): only c3 is
	// answered, and nothing stays counted as buffered.
	h.Outcomes(2, seen, nil)
	if o := seen["c3"]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("c3: %+v", o)
	}
	if len(seen["c1"])+len(seen["c2"]) != 0 {
		t.Fatalf("a command of an ended ownership was answered: c1 %+v, c2 %+v", seen["c1"], seen["c2"])
	}
	onceflighttest.WaitFor(t, 30*time.Second, "nothing left buffered", func() bool { return h.Ex.Buffered() == 0 })
}

// reassignWhileHeld starts h, answers a command of another entity, then
// submits c1 for "held" and, once its worker is held in its entity read
// (entered: holdEntityRead), ends the ownership of its partition p and
// installs a new one, restored, in its place (Reassign).
func reassignWhileHeld(t *testing.T, h *onceflighttest.Harness, entered <-chan struct{}) (int32, map[string][]schemas.Outcome) {
	t.Helper()
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	h.Submit("c0", "warm", "k0", `{}`)
	h.Outcomes(1, seen, nil)
	h.Submit("c1", "held", "k1", `{}`)
	waitEntered(t, entered, "no worker took c1 off its queue")
	p := partitioner.ForEntity("held", onceflighttest.Partitions)
	if !h.Ex.Reassign(p) {
		t.Fatalf("partition %d not owned", p)
	}
	return p, seen
}
