package consumer_test

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestFaultIntentBeforeEffect: the broker refuses the EndTxn that would
// commit a command's intent. The attempt must not be sent (its waiter is
// released only by a committed transaction); the executor recreates its
// client, consumes the command again and sends the attempt under a new,
// committed intent. Every request the service saw matches an in_progress
// record (key, attempt, fencing token) that is read_committed in the
// journal.
func TestFaultIntentBeforeEffect(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var armed atomic.Bool
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !r.Commit || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		refused.Add(1)
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
	type post struct{ key, attempt, token string }
	svc := apifake.NewEffects(t)
	h.UseConfig(fmt.Sprintf("actions:\n  pay.call:\n    connector: http\n    url: %s\n    timeout: 2s\n", svc.URL("")))
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 20*time.Second, "the executor to be ready", h.Ex.Ready)
	armed.Store(true)
	h.SubmitAction("c1", "pay.call", "order-1", "k1", `{"amount":1}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	h.Stop()
	if refused.Load() != 1 {
		t.Fatalf("EndTxn refused %d times, want 1", refused.Load())
	}
	if s := seen["c1"][0].Record.Status; s != schemas.StatusSucceeded {
		t.Fatalf("c1: %s", s)
	}
	intents := map[post]bool{}
	for _, rec := range h.JournalAll() {
		if rec.Status == schemas.StatusInProgress {
			intents[post{rec.IdempotencyKey, strconv.Itoa(rec.Attempts), strconv.FormatInt(rec.FencingToken, 10)}] = true
		}
	}
	var posts []post
	for _, e := range svc.EventsWhere(func(apifake.Event) bool { return true }) {
		posts = append(posts, post{e.Key, e.Attempt, e.Header.Get("Onceflight-Fencing-Token")})
	}
	if len(posts) != 1 {
		t.Errorf("service saw %d requests, want 1: %+v", len(posts), posts)
	}
	for _, p := range posts {
		if !intents[p] {
			t.Errorf("request %+v sent without a committed intent (committed intents: %v)", p, intents)
		}
	}
	h.Audit()
}
