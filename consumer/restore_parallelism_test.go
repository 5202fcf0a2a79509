package consumer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
)

// TestRestoreParallelismBoundsRestores: an operator lowers the restore's
// peak memory with RestoreParallelism (serve --restore-parallelism), so no
// more partitions may restore at once than it says, and all of them must
// still restore.
func TestRestoreParallelismBoundsRestores(t *testing.T) {
	const limit = 2 // below the harness's partitions and the default
	if onceflighttest.Partitions <= limit {
		t.Fatalf("the harness has %d partitions: the test needs more than %d", onceflighttest.Partitions, limit)
	}
	var cur, peak, restored atomic.Int32
	t.Cleanup(consumer.SetRestoreHook(func(int32) func() {
		n := cur.Add(1)
		for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
		}
		// Long enough that every restore allowed to run at once does.
		time.Sleep(300 * time.Millisecond)
		return func() { cur.Add(-1); restored.Add(1) }
	}))
	h := onceflighttest.New(t)
	n := h.StartNode("a", t.TempDir(), onceflighttest.NodeOptions{Tune: func(c *consumer.Config) { c.RestoreParallelism = limit }})
	onceflighttest.WaitFor(t, 30*time.Second, "the executor ready", n.Ex.Ready)
	if got := restored.Load(); got < onceflighttest.Partitions {
		t.Fatalf("%d partitions restored, want all %d", got, onceflighttest.Partitions)
	}
	if got := peak.Load(); got != limit {
		t.Fatalf("at most %d partitions restored at once, want %d (RestoreParallelism)", got, limit)
	}
}
