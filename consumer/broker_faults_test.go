package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// brokerFaultWorkload submits new keys on several entities and a repeat of
// one of them after it was answered, and checks that each command has one
// outcome, each key took effect once (the noop connector's effects file),
// and the audit passes. stop stops the executor before the checks.
func brokerFaultWorkload(t *testing.T, h *onceflighttest.Harness, stop func()) {
	t.Helper()
	var ids []string
	for i := range 8 {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		h.Submit(id, fmt.Sprintf("order-%d", i%4), fmt.Sprintf("k%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(len(ids), seen, nil)
	h.Submit("again", "order-0", "k0", `{}`) // a repeat: answered from the record
	ids = append(ids, "again")
	h.Outcomes(len(ids), seen, nil)
	stop()
	all := h.AllOutcomes()
	kafkatest.OneOutcomeEach(t, all, ids)
	for _, id := range ids {
		if s := all[id][0].Record.Status; s != schemas.StatusSucceeded {
			t.Errorf("%s: %s %+v", id, s, all[id][0].Record.Error)
		}
	}
	if !all["again"][0].Replayed {
		t.Errorf("the repeat of k0 was not answered from its record")
	}
	n := h.EffectCount()
	for i := range 8 {
		if k := fmt.Sprintf("k%d", i); n[k] != 1 {
			t.Errorf("%s took effect %d times, want 1", k, n[k])
		}
	}
	h.Audit()
}

// TestFaultBrokerErrors injects errors (kfake faults, answered by the broker
// over TCP to the real client) into the requests of the executor's
// transactions while it works: each transaction that meets one aborts, its
// work is kept and retried (or the client is recreated and the commands
// consumed again), and nothing is lost or done twice.
func TestFaultBrokerErrors(t *testing.T) {
	cases := []struct {
		name   string
		fault  kfake.Fault
		fenced bool // counted as a refused offset commit
	}{
		{"TxnOffsetCommit/ILLEGAL_GENERATION", kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.IllegalGeneration, Count: 2}, true},
		{"TxnOffsetCommit/UNKNOWN_MEMBER_ID", kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.UnknownMemberID, Count: 2}, true},
		{"AddOffsetsToTxn/UNKNOWN_SERVER_ERROR", kfake.Fault{Keys: []kmsg.Key{kmsg.AddOffsetsToTxn}, TopLevel: true, Err: kerr.UnknownServerError, Count: 2}, false},
		// With KIP-890 (kfake, and franz-go against it) a partition joins
		// the transaction with its first Produce: no AddPartitionsToTxn is
		// sent, and the broker refusing that implicit add answers the
		// Produce with TRANSACTION_ABORTABLE or INVALID_TXN_STATE.
		{"Produce/journal/TRANSACTION_ABORTABLE", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.journal", Err: kerr.TransactionAbortable, Count: 1}, false},
		{"Produce/outcomes/INVALID_TXN_STATE", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.outcomes", Err: kerr.InvalidTxnState, Count: 1}, false},
		{"EndTxn/UNKNOWN_SERVER_ERROR", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true, Err: kerr.UnknownServerError, Count: 1}, false},
		// Twice: the second refusal can hit an epoch marker while the
		// recreated client's restores run; the restores still waiting for
		// that client's pipeline must give up (it is over) instead of
		// holding Close until RestoreTimeout (45s).
		{"EndTxn/UNKNOWN_SERVER_ERROR/twice", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true, Err: kerr.UnknownServerError, Count: 2}, false},
		{"EndTxn/CONCURRENT_TRANSACTIONS", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true, Err: kerr.ConcurrentTransactions, Count: 3}, false},
		{"Produce/outcomes/NOT_LEADER_OR_FOLLOWER", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.outcomes", Err: kerr.NotLeaderForPartition, Count: 1}, false},
		{"Produce/outcomes/REQUEST_TIMED_OUT", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.outcomes", Err: kerr.RequestTimedOut, Count: 2}, false},
		{"Produce/journal/UNKNOWN_SERVER_ERROR", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.journal", Err: kerr.UnknownServerError, Count: 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			if tc.fault.Keys[0] == kmsg.AddOffsetsToTxn {
				// Sent only before KIP-890 part 2 (commitOffsets).
				setTxnVersion(t, c, 0)
			}
			h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
			n := h.StartNode("test", t.TempDir(), onceflighttest.NodeOptions{})
			stop := func() {
				if err := n.Stop(); err != nil {
					t.Errorf("run: %v", err)
				}
			}
			onceflighttest.WaitFor(t, 20*time.Second, "the executor to be ready", n.Ex.Ready)
			f := c.Fault(tc.fault)
			brokerFaultWorkload(t, h, stop)
			if f.Hits() == 0 {
				t.Fatalf("the fault was never hit: the test proves nothing")
			}
			if got := n.Counter("onceflight_fenced_writes_total", map[string]string{"stage": "commit"}); tc.fenced && got < 1 {
				t.Errorf("fenced_writes_total{stage=commit} = %v after a refused offset commit", got)
			}
		})
	}
}

// TestFaultInitProducerIDRefusedAtStart: the broker refuses the
// executor's transactional id for good (not authorized; a transaction
// timeout above the broker's maximum). Run must end with an error that
// names the transactional id and the broker's answer — a clean exit for
// serve — instead of retrying a client that can never commit.
func TestFaultInitProducerIDRefusedAtStart(t *testing.T) {
	for _, e := range []*kerr.Error{kerr.TransactionalIDAuthorizationFailed, kerr.InvalidTransactionTimeout} {
		t.Run(e.Message, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, TopLevel: true, Err: e, Count: -1})
			h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
			n := h.StartNode("test", t.TempDir(), onceflighttest.NodeOptions{})
			var runErr error
			select {
			case runErr = <-n.Done:
			case <-time.After(30 * time.Second):
				t.Fatalf("Run still going 30s after the broker refused its transactional id (%d refusals)", f.Hits())
			}
			if runErr == nil || !strings.Contains(runErr.Error(), "onceflight-test") || !strings.Contains(runErr.Error(), e.Message) {
				t.Fatalf("Run returned %v, want an error naming the transactional id and %s", runErr, e.Message)
			}
			t.Logf("Run: %v", runErr)
			n.Done <- runErr // for the cleanup's stop
		})
	}
}

// setTxnVersion sets the cluster's transaction.version feature: below 2,
// clients run transactions as before KIP-890 part 2 (AddPartitionsToTxn
// before producing, AddOffsetsToTxn before committing offsets).
func setTxnVersion(t *testing.T, c *kfake.Cluster, v int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrUpdateFeaturesRequest()
	fu := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
	fu.Feature = "transaction.version"
	fu.MaxVersionLevel = v
	fu.UpgradeType = 2 // safe downgrade
	req.FeatureUpdates = append(req.FeatureUpdates, fu)
	resp, err := req.RequestWith(context.Background(), cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	for _, r := range resp.Results {
		if err == nil {
			err = kerr.ErrorForCode(r.ErrorCode)
		}
	}
	if err != nil {
		t.Fatalf("UpdateFeatures transaction.version %d: %v", v, err)
	}
}

// TestAddOffsetsToTxnOnlyBeforeKIP890: under KIP-890 part 2 a transaction's
// TxnOffsetCommit adds the group itself, so once the client is seen to run
// that protocol the executor sends no AddOffsetsToTxn (one broker round
// trip less per transaction); before it (transaction.version 0), every
// transaction still sends one. Both answer every command once.
func TestAddOffsetsToTxnOnlyBeforeKIP890(t *testing.T) {
	for _, tv := range []int16{2, 0} {
		t.Run(fmt.Sprintf("transaction.version=%d", tv), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			if tv < 2 {
				setTxnVersion(t, c, tv)
			}
			var adds atomic.Int32
			c.ControlKey(int16(kmsg.AddOffsetsToTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				adds.Add(1)
				return nil, nil, false
			})
			h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
			n := h.StartNode("test", t.TempDir(), onceflighttest.NodeOptions{})
			defer func() {
				if err := n.Stop(); err != nil {
					t.Errorf("run: %v", err)
				}
			}()
			onceflighttest.WaitFor(t, 20*time.Second, "the executor to be ready", n.Ex.Ready)
			seen := map[string][]schemas.Outcome{}
			h.Submit("c0", "order-0", "k0", `{}`)
			h.Outcomes(1, seen, nil)
			before := adds.Load()
			const cmds = 5
			for i := 1; i <= cmds; i++ { // one transaction each
				h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("order-%d", i), fmt.Sprintf("k%d", i), `{}`)
				h.Outcomes(i+1, seen, nil)
			}
			sent := adds.Load() - before
			switch {
			case tv >= 2 && sent != 0:
				t.Errorf("%d AddOffsetsToTxn in %d transactions under KIP-890 part 2, want none", sent, cmds)
			case tv < 2 && sent < cmds:
				t.Errorf("%d AddOffsetsToTxn in %d transactions before KIP-890 part 2, want one each", sent, cmds)
			}
			for id, o := range seen {
				if len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
					t.Errorf("%s: %+v, want one success", id, o)
				}
			}
			h.Audit()
		})
	}
}
