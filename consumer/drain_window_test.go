package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
)

// A revoke's drain waits for a command that a worker has taken off its
// entity's queue, also while the worker is still reading the entity's
// state. Were the command counted as running only after that read, the
// drain could find it neither queued nor running, return, and let the
// partition go with the command about to run.
func TestDrainWaitsForCommandTakenOffItsQueue(t *testing.T) {
	h := onceflighttest.New(t)
	entered, free := holdEntityRead(t, "held")
	n := h.StartNode("a", t.TempDir(), onceflighttest.NodeOptions{})
	onceflighttest.WaitFor(t, 30*time.Second, "the executor ready", n.Ex.Ready)
	h.Submit("c1", "held", "k1", `{}`)
	drainFailsWhileHeld(t, n, entered, free, "no worker took the command off its queue",
		"the drain returned while a command taken off its queue was neither staged nor counted as running")
}

// drainFailsWhileHeld waits for the entity read holdEntityRead holds
// (entered; else it fails with notEntered), then wants a drain of n's
// partitions, given 300 ms, to fail while the read is held (else it fails
// with drained); the read is freed once the drain returned.
func drainFailsWhileHeld(t *testing.T, n *onceflighttest.Node, entered <-chan struct{}, free func(), notEntered, drained string) {
	t.Helper()
	waitEntered(t, entered, notEntered)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := n.Ex.DrainOwned(ctx)
	free()
	if err == nil {
		t.Fatal(drained)
	}
	t.Logf("drain, as expected: %v", err)
}

// holdEntityRead makes every read of entity's state for a command taken to
// run (consumer.SetEntityReadHook) wait until free is called (at the end
// of the test at the latest); entered receives when one is waiting.
func holdEntityRead(t *testing.T, entity string) (entered <-chan struct{}, free func()) {
	in := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	free = func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	t.Cleanup(consumer.SetEntityReadHook(func(e string) {
		if e != entity {
			return
		}
		select {
		case in <- struct{}{}:
		default:
		}
		<-release
	}))
	return in, free
}

// waitEntered waits for the entity read holdEntityRead holds (entered),
// failing with notEntered after 30 s.
func waitEntered(t *testing.T, entered <-chan struct{}, notEntered string) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal(notEntered)
	}
}
