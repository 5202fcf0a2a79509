package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/broker"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// setup starts an embedded broker with the given topics (name -> partitions)
// and returns a client from New.
func setup(t *testing.T, topics map[string]int32) (context.Context, *kgo.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	b, err := broker.Start(ctx, "127.0.0.1:0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := New([]string{b.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	for topic, n := range topics {
		if _, err := adm.CreateTopic(ctx, n, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, cl
}

// txn writes recs in one transaction, committed or aborted, so tests see
// what read_committed readers must (and must not) see.
// It reports with t.Error, so it may run on another goroutine.
func txn(ctx context.Context, t *testing.T, addr []string, commit bool, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.TransactionalID(fmt.Sprint("test-", time.Now().UnixNano())), kgo.ProducerLinger(0))
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Error(err)
		return
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Error(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Error(err)
	}
}

func outcome(t *testing.T, topic, key, entity, causation string, st schemas.Status) *kgo.Record {
	t.Helper()
	r, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: key, Entity: entity, Action: "test.act", Status: st}, causation, false)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = topic
	return r
}

func TestWaitOutcome(t *testing.T) {
	const topic = "outcomes"
	ctx, cl := setup(t, map[string]int32{topic: 3})
	seeds := cl.OptValues(kgo.SeedBrokers)[0].([]string)

	// Written before the offsets are taken: must not be returned even
	// though it answers the same command id.
	if err := cl.ProduceSync(ctx, outcome(t, topic, "k", "ent", "cmd-1", schemas.StatusRejected)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	from, err := EndOffsets(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}

	junk := &kgo.Record{Topic: topic, Key: []byte("ent"), Value: []byte("not an event")}
	other := outcome(t, topic, "k2", "ent", "cmd-other", schemas.StatusSucceeded)
	zombie := outcome(t, topic, "k", "ent", "cmd-1", schemas.StatusSucceeded)
	real := outcome(t, topic, "k", "ent", "cmd-1", schemas.StatusFailed)
	go func() {
		time.Sleep(100 * time.Millisecond)
		txn(ctx, t, seeds, true, junk, other)
		// Aborted (a fenced zombie's write): invisible to read_committed.
		txn(ctx, t, seeds, false, zombie)
		txn(ctx, t, seeds, true, real)
	}()
	o, rec, err := WaitOutcomeRecord(ctx, cl, topic, "cmd-1", from)
	if err != nil {
		t.Fatal(err)
	}
	if o.CausationID != "cmd-1" || o.Record.Status != schemas.StatusFailed || o.IdempotencyKey != "k" {
		t.Fatalf("got %+v", o)
	}
	if rec == nil || len(rec.Value) == 0 {
		t.Fatal("no record returned")
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = WaitOutcome(short, cl, topic, "never", from)
	if !errors.Is(err, ErrNoOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout error = %v", err)
	}
	if _, err := EndOffsets(ctx, cl, "missing-topic"); err == nil {
		t.Fatal("EndOffsets of a missing topic succeeded")
	}
}

func TestReadBounds(t *testing.T) {
	const topic = "bounds"
	ctx, cl := setup(t, map[string]int32{topic: 2})
	for i := range 4 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: []byte("old")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	count := func(fromStart, follow bool, d time.Duration) int {
		c, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		n := 0
		err := Read(c, cl, topic, fromStart, follow, func(*kgo.Record) error { n++; return nil })
		if follow && !errors.Is(err, context.DeadlineExceeded) || !follow && err != nil {
			t.Fatalf("Read(%v, %v) = %v", fromStart, follow, err)
		}
		return n
	}
	if n := count(false, false, 5*time.Second); n != 0 {
		t.Fatalf("neither flag read %d records", n)
	}
	if n := count(true, false, 5*time.Second); n != 4 {
		t.Fatalf("from beginning read %d records, want 4", n)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("new")})
	}()
	if n := count(false, true, time.Second); n != 1 {
		t.Fatalf("follow read %d records, want only the new one", n)
	}
}

// TestKeyedPartitioning pins the claim in New's doc: a keyed record from a
// client of New lands where partitioner.ForEntity says (docs/guarantees.md).
func TestKeyedPartitioning(t *testing.T) {
	const topic, n = "parts", 7
	ctx, cl := setup(t, map[string]int32{topic: n})
	for i := range 50 {
		e := fmt.Sprintf("order-%d", i)
		r := &kgo.Record{Topic: topic, Key: []byte(e)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if want := partitioner.ForEntity(e, n); r.Partition != want {
			t.Fatalf("%s went to %d, ForEntity says %d", e, r.Partition, want)
		}
	}
}
