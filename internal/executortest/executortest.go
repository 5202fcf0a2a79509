// Package executortest runs a real executor on kfake for the tests of the
// packages built on top of it (inspect, ingress), so that they test against
// the executor's behaviour rather than a stand-in, and share one set-up.
package executortest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/schemas"
)

// Start starts kfake and an executor of the actions file yaml (written to a
// temporary directory, so relative paths resolve there), waits for its
// topics, and returns a client of it with the loaded configuration. Both
// stop at the end of the test.
func Start(t testing.TB, yaml string) (*client.Client, *config.Config) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.Open(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	// Operator decisions must be signed: the executor verifies with this
	// key, and the returned client signs what it sends with it.
	key, err := schemas.NewControlKey("test")
	if err != nil {
		t.Fatal(err)
	}
	keys := &schemas.ControlKeys{Keys: []schemas.ControlKey{key}}
	ex, err := consumer.New(consumer.Config{
		ControlKeys: keys,
		Brokers:     c.ListenAddrs(), Partitions: 3, SessionTimeout: 6 * time.Second,
		ClockDrift: 100 * time.Millisecond, ExecutorID: "test-executor",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}, cfg, store, consumer.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("executor: %v", err)
		}
		store.Close()
	})
	if err := WaitTopics(context.Background(), c.ListenAddrs(), client.DefaultTopics()); err != nil {
		t.Fatal(err)
	}
	oc, err := client.New(client.WithBrokers(c.ListenAddrs()...), client.WithControlKeys(keys))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(oc.Close)
	return oc, cfg
}

// WaitTopics waits until every topic of tp exists on brokers: the executor
// creates its topics as it starts, and a client needs them. It returns an
// error rather than failing a test so that examples, which have no
// testing.TB, can use it too.
func WaitTopics(ctx context.Context, brokers []string, tp client.Topics) error {
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
