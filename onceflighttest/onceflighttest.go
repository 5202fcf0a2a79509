// Package onceflighttest is the in-process executor harness: real executors
// (package consumer, Pebble under a temporary directory) against a real
// Kafka protocol broker over TCP — kfake, or any brokers with OnBrokers.
// The executor's own tests, the audit's, the client's and the command
// line's use it, and so can a program that embeds the executor (a
// connector of its own, cli.WithConnector): they test against the
// executor's behaviour rather than a stand-in, and share one set-up, so a
// change to how an executor starts is made once.
//
// New returns a Harness; Start runs its single executor, StartNode one of
// several (a Node); Submit, Outcomes, AllOutcomes, Journal, EffectCount and
// Audit drive and observe them. Start (the function) is the shortcut for
// tests that only need a public client of one executor.
//
// A test of an action against a system of its own, through the public
// client (an http action against an httptest server here):
//
//	func TestRefundIsRecorded(t *testing.T) {
//		api := httptest.NewServer(refunds) // the external system
//		defer api.Close()
//		c, _ := onceflighttest.Start(t, "actions:\n  refund.create:\n    connector: http\n    url: "+api.URL+"/refunds\n")
//		ctx := context.Background()
//		p, err := c.Submit(ctx, client.Command{Action: "refund.create", Entity: "order-42",
//			Key: "refund-42", Data: json.RawMessage(`{"amount":1250}`)})
//		if err != nil {
//			t.Fatal(err)
//		}
//		o, err := p.Wait(ctx)
//		if err != nil || o.Status != schemas.StatusSucceeded {
//			t.Fatalf("refund: %v %+v", err, o)
//		}
//	}
//
// The client's own tests (client/executor_test.go) and the command line's
// are complete examples.
package onceflighttest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/schemas"
)

// Start starts kfake and an executor "test-executor" of the actions file
// yaml (written to a temporary directory, so relative paths resolve
// there), waits for its topics, and returns a client of it with the loaded
// configuration. Both stop at the end of the test. It is a Harness for the
// tests that only need the public client.
func Start(t testing.TB, yaml string) (*client.Client, *consumer.Actions) {
	t.Helper()
	h := New(t)
	h.UseConfig(yaml)
	// Operator decisions must be signed: the executor verifies with this
	// key, and the returned client signs what it sends with it.
	key, err := schemas.NewOperatorKey("test")
	if err != nil {
		t.Fatal(err)
	}
	keys := &schemas.ControlKeys{Keys: []schemas.ControlKey{key}}
	h.Tune = func(c *consumer.Config) {
		c.ControlKeys, c.ExecutorID = keys, "test-executor"
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	h.Start(filepath.Join(t.TempDir(), "state"))
	if err := WaitTopics(context.Background(), h.Brokers, schemas.DefaultTopics()); err != nil {
		t.Fatal(err)
	}
	oc, err := client.New(client.WithBrokers(h.Brokers...), client.WithControlKeys(keys))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(oc.Close)
	return oc, h.Config
}

// WaitTopics waits until every topic of tp exists on brokers: the executor
// creates its topics as it starts, and a client needs them. It returns an
// error rather than failing a test so that examples, which have no
// testing.TB, can use it too.
func WaitTopics(ctx context.Context, brokers []string, tp schemas.Topics) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	for {
		td, err := adm.ListTopics(ctx, tp.Commands, tp.Outcomes, tp.Journal, tp.Deadletter)
		if err == nil && len(td) == 4 && td.Error() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("executor topics: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
