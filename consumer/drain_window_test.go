package consumer_test

import (
	"context"
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
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	t.Cleanup(consumer.SetEntityReadHook(func(entity string) {
		if entity != "held" {
			return
		}
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}))
	n := h.StartNode("a", t.TempDir(), onceflighttest.NodeOptions{})
	onceflighttest.WaitFor(t, 30*time.Second, "the executor ready", n.Ex.Ready)
	h.Submit("c1", "held", "k1", `{}`)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("no worker took the command off its queue")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := n.Ex.DrainOwned(ctx)
	close(release)
	if err == nil {
		t.Fatal("the drain returned while a command taken off its queue was neither staged nor counted as running")
	}
	t.Logf("drain, as expected: %v", err)
}
