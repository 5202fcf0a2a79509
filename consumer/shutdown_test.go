package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// brokerSide are kfake's goroutines serving connections: the broker's, not
// the executor's (they end when the broker notices the closed connection).
var brokerSide = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read"),
	goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read.func1"),
	goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).write"),
}

// TestRunLeavesNothingRunning (issue 19): when Run returns, nothing the
// executor started is still running — pipeline workers, committer, poll
// watcher, reconciler, partition watch, gauges, prune, clients — so the
// caller may close the store. Each round starts an executor on the same
// data dir, has it answer a command (sent and read with a client of the
// round, closed before the check), stops it and closes its store; the
// goroutines left must be those from before it started.
func TestRunLeavesNothingRunning(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("reconcile:\n  every: 50ms\nactions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n", h.Effects))
	before := goleak.IgnoreCurrent()
	dir := t.TempDir()
	for i := range 3 {
		h.Start(dir)
		answerOne(t, h.Brokers, fmt.Sprintf("c%d", i))
		h.Stop()
		if err := goleak.Find(append(brokerSide, before)...); err != nil {
			t.Fatalf("round %d: goroutines left after Run returned and the store closed:\n%v", i, err)
		}
	}
}

// answerOne sends command id and waits for its outcome with a client of
// its own, closed when it returns.
func answerOne(t *testing.T, brokers []string, id string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeTopics("onceflight.outcomes"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := schemas.EncodeCommand(schemas.Command{ID: id, Source: "test", Type: "noop.ping", Subject: "order-1", IdempotencyKey: id, Data: json.RawMessage(`{}`)}, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no outcome for %s", id)
		}
		for _, rec := range fs.Records() {
			if o, err := schemas.DecodeOutcome(rec); err == nil && o.CausationID == id {
				return
			}
		}
	}
}
