package consumer_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A shutdown ends while the poll loop waits for room among the staged
// answers (a deadletter's, or a repeat's it answers itself) and the
// brokers refuse every transaction (a write ACL gone: each aborts and is
// retried, so nothing staged settles). That wait ended only on a settle, a
// lost partition, a stopped committer or a stopping pipeline — and the
// pipeline stops only once the poll loop has returned: Run never returned.
func TestShutdownEndsPollLoopWaitingForStagedRoom(t *testing.T) {
	h, c := newClusterHarness(t)
	waiting := make(chan struct{}, 1)
	t.Cleanup(consumer.SetStagedWaitHook(func(woken bool) {
		if !woken {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
	}))
	n := h.StartNode("test", t.TempDir(), onceflighttest.NodeOptions{Tune: func(cfg *consumer.Config) {
		// One deadletter's answer (~3 KiB) fits, two do not.
		cfg.MaxBufferedBytes = 5000
	}})
	onceflighttest.WaitFor(t, 30*time.Second, "the executor ready", n.Ex.Ready)
	seen := map[string][]schemas.Outcome{}
	h.Submit("c0", "warm", "k0", `{}`)
	h.Outcomes(1, seen, nil)

	f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.deadletter", Err: kerr.TransactionAbortable, Count: -1})
	t.Cleanup(f.Remove)
	h.Produce(&kgo.Record{Topic: "onceflight.commands", Value: []byte("not a cloudevent")})
	h.Produce(&kgo.Record{Topic: "onceflight.commands", Value: []byte("not a cloudevent either")})
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the poll loop never waited for staged room")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- n.Stop() }()
	select {
	case err := <-stopped:
		t.Logf("Run returned: %v", err)
	case <-time.After(45 * time.Second):
		f.Remove() // let it end
		<-stopped
		t.Fatal("Run did not return within 45 s of its cancel while the poll loop waited for staged room")
	}
}
