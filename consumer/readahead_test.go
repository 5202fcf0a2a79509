package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// TestReadAheadStopsWhereTheLoopDid: readAhead hands over every journal
// offset in order with the index fields of each record decoded as
// applyJournal would decode them (markers and undecodable values
// included), stops after the poll that reaches its target — so a second
// catch-up on the same reader starts exactly at the next offset, none lost
// or read twice — and stop ends it early without a poll left running.
func TestReadAheadStopsWhereTheLoopDid(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("journal"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	const n = 60
	for i := range n {
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}}
		switch {
		case i%10 == 3:
			r.Headers[0].Value = []byte(schemas.KindEpoch)
			r.Value = []byte(`{"epoch":7}`)
		case i%10 == 6:
			r.Value = []byte(`{"not":"a record"`)
		default:
			at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
			rec := schemas.Record{IdempotencyKey: fmt.Sprintf("k%d", i), Entity: fmt.Sprintf("e%d", i%7), Action: "a.b",
				Status: schemas.StatusSucceeded, Fingerprint: "sha256:x", Attempts: 1, Result: json.RawMessage(`{}`),
				Command: schemas.CommandRef{ID: fmt.Sprintf("c%d", i), Source: "t"}, Executor: "t", Epoch: 7, Hash: fmt.Sprintf("sha256:%d", i),
				StartedAt: &at, FinishedAt: &at}
			if r.Value, err = wire.SealRecord(&rec); err != nil {
				t.Fatal(err)
			}
		}
		// One produce per record: many batches, so that a small fetch
		// size makes many polls.
		if err := pr.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"journal": {0: kgo.NewOffset().At(0)}}),
		kgo.FetchMaxPartitionBytes(1), kgo.FetchMaxBytes(1))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	next := int64(0)
	polls := 0
	read := func(from, target int64) {
		chunks, done, stop := readAhead(ctx, rd, from, target, true)
		defer stop()
		lastStart := int64(-1)
		for ch := range chunks {
			if ch.err != nil {
				t.Fatal(ch.err)
			}
			polls++
			if len(ch.records) > 0 {
				lastStart = ch.records[0].Offset
			}
			if len(ch.decoded) != len(ch.records) {
				t.Fatalf("%d records, %d decoded", len(ch.records), len(ch.decoded))
			}
			for i, r := range ch.records {
				if r.Offset != next {
					t.Fatalf("offset %d handed over, want %d", r.Offset, next)
				}
				next++
				var want decodedRecord
				if wire.JournalKind(r) == schemas.KindRecord {
					want.rec, want.err = schemas.UnmarshalRecordIndex(r.Value)
				}
				if got := ch.decoded[i]; !reflect.DeepEqual(got.rec, want.rec) || (got.err == nil) != (want.err == nil) {
					t.Fatalf("offset %d decoded as %+v, want %+v", r.Offset, got, want)
				}
			}
			done(ch)
		}
		if next < target {
			t.Fatalf("read-ahead ended at %d before its target %d", next, target)
		}
		if lastStart >= target {
			t.Fatalf("read-ahead to %d handed over a poll from offset %d: it polled past the poll that reached its target", target, lastStart)
		}
	}
	read(0, 25)
	read(next, n)
	if next != n || polls < 3 {
		t.Fatalf("read %d offsets in %d polls, want %d in several", next, polls, n)
	}

	// Nothing more to read: stop ends the poll waiting for it.
	_, _, stop := readAhead(ctx, rd, n, n+1, true)
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not end the read-ahead")
	}
}
