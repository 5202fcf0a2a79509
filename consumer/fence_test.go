package consumer_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestFenceRefusesZombieWithStaleGeneration is the KIP-447 fence, seen
// from the broker's side. Executor A reads its membership (generation G)
// and starts the transaction with a command's answer; its Produce is held
// by the broker while A's heartbeats are answered "ok" without reaching the
// group, so A never learns that its session expired. B joins, restores,
// inherits the command and answers it. Then A's held transaction goes on:
// A passed every client-side ownership check, so only the broker's refusal
// of its TxnOffsetCommit (stale generation, unknown member) stands between
// its late write and the journal. The transaction must abort and nothing
// A staged may be visible to read_committed readers.
func TestFenceRefusesZombieWithStaleGeneration(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))

	var (
		aMember     atomic.Pointer[string]
		fakeHB      atomic.Bool // A's heartbeats answered without reaching the group
		holdProduce atomic.Bool // hold A's next transactional Produce
		release     = make(chan struct{})
		released    atomic.Bool
		held        = make(chan struct{}, 1)
		ended       = make(chan bool, 1) // A's EndTxn after the release: commit?
	)
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.HeartbeatRequest)
		if m := aMember.Load(); fakeHB.Load() && m != nil && r.MemberID == *m {
			return r.ResponseKind(), nil, true // error code 0: "still a member"
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if r.TransactionID != nil && *r.TransactionID == "onceflight-A" && holdProduce.CompareAndSwap(true, false) {
			held <- struct{}{}
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID == "onceflight-A" && released.Load() {
			select {
			case ended <- r.Commit:
			default:
			}
		}
		return nil, nil, false
	})

	svc := apifake.NewEffects(t, apifake.WithScript(func(_ string, n int) apifake.Fault {
		if n == 1 {
			// A's intent is committed (it precedes the attempt):
			// from now on A is a zombie that does not know it.
			fakeHB.Store(true)
			holdProduce.Store(true)
		}
		return apifake.None
	}))
	h.UseConfig(fmt.Sprintf(`actions:
  pay.call:
    connector: http
    url: %[1]s
    confirm_url: %[1]s/{key}
    timeout: 1s
`, svc.URL("")))
	tune := func(cfg *consumer.Config) {
		cfg.SessionTimeout = 2 * time.Second
		// Long enough that the broker never times A's transaction out
		// itself: the fence under test must be the one that stops it.
		cfg.TransactionTimeout = time.Minute
		cfg.RevokeTimeout = 200 * time.Millisecond
	}
	a := h.StartNode("A", t.TempDir(), onceflighttest.NodeOptions{Tune: tune, KafkaOpts: kafkatest.ShortHeartbeats})
	onceflighttest.WaitFor(t, 20*time.Second, "A owning every partition", func() bool { return a.Owns(3) })
	ms := h.GroupMembers()
	if len(ms) != 1 {
		t.Fatalf("group members %v, want A alone", ms)
	}
	aMember.Store(&ms[0])

	h.SubmitAction("c1", "pay.call", "order-1", "k1", `{"amount":1}`)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("A's answer transaction never reached the broker")
	}
	onceflighttest.WaitFor(t, 20*time.Second, "A's session to expire", func() bool { return len(h.GroupMembers()) == 0 })

	b := h.StartNode("B", t.TempDir(), onceflighttest.NodeOptions{Tune: tune, KafkaOpts: kafkatest.ShortHeartbeats})
	onceflighttest.WaitFor(t, 30*time.Second, "B to answer k1", func() bool {
		rec, ok, err := storeof.Executor(b.Ex).Lookup("order-1", "k1")
		return err == nil && ok && rec.Status.Final()
	})
	if !a.Ex.Ready() || len(a.Ex.Owned()) != 3 {
		t.Fatalf("A learned of its loss before writing (ready %v, owns %v): the test would not reach the broker's fence", a.Ex.Ready(), a.Ex.Owned())
	}

	// The zombie's transaction goes on: produce, offsets, end.
	released.Store(true)
	close(release)
	var commit bool
	select {
	case commit = <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("A's held transaction never ended")
	}
	fakeHB.Store(false)
	if commit {
		t.Errorf("the zombie's transaction was committed: the broker accepted its TxnOffsetCommit")
	} else {
		onceflighttest.WaitFor(t, 20*time.Second, "A to count the refused commit", func() bool {
			return a.Counter("onceflight_fenced_writes_total", map[string]string{"stage": "commit"}) >= 1
		})
	}
	if err := a.Stop(); err != nil {
		t.Errorf("A: %v", err)
	}
	if err := b.Stop(); err != nil {
		t.Errorf("B: %v", err)
	}

	for _, rec := range h.JournalAll() {
		if rec.IdempotencyKey == "k1" && rec.Executor == "A" && rec.Status != schemas.StatusInProgress {
			t.Errorf("the zombie's %s record of k1 is visible in the journal", rec.Status)
		}
	}
	seen := h.AllOutcomes()
	kafkatest.OneOutcomeEach(t, seen, []string{"c1"})
	for _, o := range seen["c1"] {
		if o.Record.Executor == "A" {
			t.Errorf("the zombie's outcome of c1 (%s) is visible", o.Record.Status)
		}
		if o.Record.Status != schemas.StatusSucceeded {
			t.Errorf("c1: %s", o.Record.Status)
		}
	}
	if posts, _, _ := svc.Counts("k1"); len(posts) != 1 {
		t.Errorf("k1 posted %d times, want 1", len(posts))
	}
	h.Audit()
}
