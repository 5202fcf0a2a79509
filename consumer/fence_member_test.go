package consumer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/schemas"
)

// committerOfOnePartition is a committer with no client and a pipeline
// holding one partition, 0, assigned to member: enough to stage and take
// work and to see what a flush would drop.
func committerOfOnePartition(member string) (*Executor, *partState, *pipeline, *committer) {
	e := &Executor{m: newMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler)}
	st := &partState{p: 0, member: member}
	e.mu.parts = map[int32]*partState{0: st}
	pl := &pipeline{e: e}
	pl.mu.ov = newOverlay()
	c := newCommitter(e, nil, pl)
	pl.cm = c
	return e, st, pl, c
}

// TestWorkOfAnEarlierMembershipIsDropped: work staged for a partition
// assigned to an earlier group membership of this process is dropped at
// the flush, though the partition is still held. A member that was
// evicted and rejoined gets a new member id, and the cooperative protocol
// may hand it back partitions it claimed from before without a callback,
// though another member owned them in between; the offset commit of the
// new membership is accepted whatever partitions it names, so it must not
// carry the old membership's work. The simulation found it (round 13:
// make sim SEED=10 with a 250 ms fetch long poll committed a replaced
// owner's intents, and their POSTs went out twice).
func TestWorkOfAnEarlierMembershipIsDropped(t *testing.T) {
	e, _, pl, c := committerOfOnePartition("member-1")
	j := &job{p: pl, e: e}
	d := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	intent := schemas.Record{Entity: "e-1", IdempotencyKey: "k-1", Action: "a.b", Status: schemas.StatusInProgress,
		Attempts: 1, Deadline: &d, Command: schemas.CommandRef{ID: "c-1", Partition: 0}}
	queue := func() []entry {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing commits here: the intent stays queued
		if _, err := j.intent(ctx, 0, intent); err != context.Canceled {
			t.Fatalf("intent: err %v, want the canceled wait", err)
		}
		return c.take()
	}
	if kept := c.dropUnowned(queue(), "member-1"); len(kept) != 1 {
		t.Fatalf("the intent of a partition of this membership: %d entries kept, want 1", len(kept))
	}
	q := queue()
	if kept := c.dropUnowned(q, "member-2"); len(kept) != 0 {
		t.Fatalf("the intent of a partition of an earlier membership: %d entries kept, want none", len(kept))
	}
	select {
	case err := <-q[0].intent.done:
		if err != errFenced {
			t.Fatalf("the dropped intent was answered %v, want errFenced", err)
		}
	default:
		t.Fatal("the dropped intent was not answered: its execution would wait for it")
	}
}

// TestAnswersOfAnEarlierMembershipAreDropped: the same for a staged
// answer (a final record and its outcome): it is dropped, not committed
// under the later membership, and its overlay entry goes with it.
func TestAnswersOfAnEarlierMembershipAreDropped(t *testing.T) {
	e, st, pl, c := committerOfOnePartition("member-1")
	d := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	final := schemas.Record{Entity: "e-1", IdempotencyKey: "k-1", Action: "a.b", Status: schemas.StatusSucceeded,
		Attempts: 1, FinishedAt: &d, Command: schemas.CommandRef{ID: "c-1", Partition: 0}}
	stage := func() []entry {
		t.Helper()
		j := &job{p: pl, e: e}
		j.add(emit{journal: &final, outcome: &final})
		c.stage(st, 7, j.emits, 0)
		return c.take()
	}
	if kept := c.dropUnowned(stage(), "member-1"); len(kept) != 1 {
		t.Fatalf("the answer of a partition of this membership: %d entries kept, want 1", len(kept))
	}
	if kept := c.dropUnowned(stage(), "member-2"); len(kept) != 0 {
		t.Fatalf("the answer of a partition of an earlier membership: %d entries kept, want none", len(kept))
	}
	if _, ok := pl.pendingRecord(scopedKey{"e-1", "k-1"}); ok {
		t.Error("the dropped answer is still in the overlay")
	}
}

// queueMarker asks c for an epoch marker of partition 0 for member, as a
// restore does, and returns the restore's answer and the queue taken once
// the marker is in it.
func queueMarker(t *testing.T, ctx context.Context, c *committer, member string) (<-chan error, []entry) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := c.marker(ctx, 0, 5, 100, member)
		errc <- err
	}()
	for {
		c.mu.Lock()
		n := len(c.mu.queue)
		c.mu.Unlock()
		if n > 0 {
			return errc, c.take()
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMarkersOfAnEarlierMembershipAreDropped: an epoch marker is written
// only under the membership its restore was assigned under. A marker
// claims its partition and re-commits the fence offset: committed under a
// later membership's generation, it would claim a partition this process
// may not own, and move that partition's committed offset under its owner.
func TestMarkersOfAnEarlierMembershipAreDropped(t *testing.T) {
	_, _, _, c := committerOfOnePartition("member-1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kept1, q := queueMarker(t, ctx, c, "member-1")
	defer func() { cancel(); <-kept1 }() // no flush answers it: its restore gives up
	if kept := c.dropUnowned(q, "member-1"); len(kept) != 1 {
		t.Fatalf("the marker of this membership's restore: %d entries kept, want 1", len(kept))
	}
	errc, q := queueMarker(t, ctx, c, "member-1")
	if kept := c.dropUnowned(q, "member-2"); len(kept) != 0 {
		t.Fatalf("the marker of an earlier membership's restore: %d entries kept, want none", len(kept))
	}
	if err := <-errc; err != errFenced {
		t.Fatalf("the dropped marker's restore got %v, want errFenced", err)
	}
}

// TestMarkersOfAbandonedRestoresAreDropped: a restore that stopped waiting
// for its marker (its deadline passed) publishes nothing and the group is
// joined again; its marker, still queued, must not be written after that.
func TestMarkersOfAbandonedRestoresAreDropped(t *testing.T) {
	_, _, _, c := committerOfOnePartition("member-1")
	ctx, stop := context.WithCancel(context.Background())
	errc, q := queueMarker(t, ctx, c, "member-1")
	stop()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("the restore that gave up got %v, want its own cancellation", err)
	}
	if kept := c.dropUnowned(q, "member-1"); len(kept) != 0 {
		t.Fatalf("the marker of a restore that gave up: %d entries kept, want none", len(kept))
	}
}
