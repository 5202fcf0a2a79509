package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/dirlock"
)

// TestRestartKeepsData is the reason this package exists: a development
// broker that forgot its topics on restart would lose the executor's journal.
func TestRestartKeepsData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	const topic = "restart-test"

	b, err := Start(ctx, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr()
	if addr == "127.0.0.1:0" {
		t.Fatalf("Addr did not resolve port 0: %s", addr)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r := &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	b.Close()
	b.Close() // idempotent

	b, err = Start(ctx, addr, dir) // same port: clients keep their config
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err = kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]string{}
	for len(seen) < 10 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("only %d of 10 records after restart", len(seen))
		}
		fs.EachError(func(t2 string, p int32, err error) { t.Logf("fetch %s/%d: %v", t2, p, err) })
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = string(r.Value) })
	}
	for i := range 10 {
		if got, want := seen[fmt.Sprint("k", i)], fmt.Sprint("v", i); got != want {
			t.Errorf("k%d = %q, want %q", i, got, want)
		}
	}
}

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, "no-port", t.TempDir()); err == nil {
		t.Error("address without port accepted")
	}
	b, err := Start(ctx, "127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := Start(ctx, b.Addr(), t.TempDir()); err == nil {
		t.Error("second broker on a busy port started")
	}
}

// TestSecondBrokerOnDataDirRefused: a second broker on a directory in use
// would rewrite the first one's log; it must fail at start, naming the
// directory and the holder.
func TestSecondBrokerOnDataDirRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := Start(ctx, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctx, "127.0.0.1:0", dir)
	if !errors.Is(err, dirlock.ErrHeld) {
		t.Fatalf("second broker on %s: %v, want it refused", dir, err)
	}
	for _, want := range []string{dir, strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	b.Close()
	// Closing releases the directory for the next broker.
	b2, err := Start(ctx, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatalf("broker after Close: %v", err)
	}
	b2.Close()
}
