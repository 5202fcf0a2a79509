package client_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// startExecutor starts kfake and a real executor with a noop action
// noop.ping, for the examples; stop shuts both down. Examples cannot take
// a *testing.T, so failures are returned.
func startExecutor() (brokers []string, stop func(), err error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "onceflight-example-")
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	fail := func(err error) ([]string, func(), error) {
		c.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	path := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(path, []byte("actions:\n  noop.ping:\n    connector: noop\n    timeout: 500ms\n"), 0o644); err != nil {
		return fail(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return fail(err)
	}
	ex, err := consumer.New(consumer.Config{
		Brokers: c.ListenAddrs(), DataDir: filepath.Join(dir, "state"), Partitions: 3, SessionTimeout: 6 * time.Second,
		ClockDrift: 100 * time.Millisecond, ExecutorID: "example",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}, cfg, consumer.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ex.Run(ctx) }()
	stopAll := func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "executor:", err)
		}
		c.Close()
		os.RemoveAll(dir)
	}
	// The executor creates its topics as it starts; a client needs them.
	if err := waitTopics(ctx, c.ListenAddrs(), schemas.DefaultTopics()); err != nil {
		stopAll()
		return nil, nil, err
	}
	return c.ListenAddrs(), stopAll, nil
}

// waitTopics waits until every topic of t exists.
func waitTopics(ctx context.Context, brokers []string, t schemas.Topics) error {
	return onceflighttest.WaitTopics(ctx, brokers, t)
}

// exampleClient is the set-up the examples after the first share: an
// executor, a client of it and a context; done releases them.
func exampleClient() (*client.Client, context.Context, func()) {
	brokers, stop, err := startExecutor()
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New(client.WithBrokers(brokers...))
	if err != nil {
		stop()
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	return c, ctx, func() { cancel(); c.Close(); stop() }
}
