package consumer_test

import (
	"testing"
	"time"

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
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	h.Submit("c0", "warm", "k0", `{}`)
	h.Outcomes(1, seen, nil)

	h.Submit("c1", "held", "k1", `{}`)
	waitEntered(t, entered, "no worker took c1 off its queue")
	// c1's worker is held; its partition's ownership ends and a new one,
	// restored, takes its place.
	p := partitioner.ForEntity("held", onceflighttest.Partitions)
	if !h.Ex.Reassign(p) {
		t.Fatalf("partition %d not owned", p)
	}
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
