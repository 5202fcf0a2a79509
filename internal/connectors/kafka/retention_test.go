package kafkaconn_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/connectors"
	kafkaconn "github.com/onceflight/onceflight/internal/connectors/kafka"
)

// Retention deleted the start of the entity's partition after the attempt
// began (a topic with a short retention, an attempt inherited after an
// outage): the record looked for may have been among what was deleted, so
// Confirm cannot say "not found" — that would produce the key again (G3).
// Where what was deleted is older than the attempt, "not found" stands, and
// a record kept is found.
func TestConfirmAfterRetention(t *testing.T) {
	c, _ := fakeCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0), kgo.RecordDeliveryTimeout(time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	const p = 1
	conn := connector(t, cl, func(string, int) int32 { return p })
	ctx := context.Background()
	produce := func(v string) int64 {
		t.Helper()
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}).First()
		if err != nil {
			t.Fatal(err)
		}
		return r.Offset
	}
	deleteBefore := func(off int64) {
		t.Helper()
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: topic, Partition: p, At: off})
		resp, err := kadm.NewClient(cl).DeleteRecords(ctx, o)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Old records, trimmed by retention before any attempt.
	produce("old-1")
	deleteBefore(produce("old-2"))

	req := connectors.Request{Action: "a", Entity: "order-1", Key: "k-1", Attempt: 1,
		Deadline: time.Now().Add(time.Second), Data: json.RawMessage(`{}`)}
	if r := conn.Confirm(ctx, req); r.Kind != connectors.NotFound {
		t.Fatalf("a key never produced, the deleted records older than the attempt: %v %s", r.Kind, r.Message)
	}
	if r := conn.Execute(ctx, req); r.Kind != connectors.Succeeded {
		t.Fatalf("execute: %v %s", r.Kind, r.Message)
	}
	if r := conn.Confirm(ctx, req); r.Kind != connectors.Succeeded {
		t.Fatalf("a kept record: %v %s", r.Kind, r.Message)
	}
	// Retention now deletes the attempt's record too.
	deleteBefore(produce("new"))
	if r := conn.Confirm(ctx, req); r.Kind != connectors.Ambiguous {
		t.Fatalf("the attempt's record deleted by retention: %v %s, want ambiguous", r.Kind, r.Message)
	}
	// And every record.
	deleteBefore(produce("newer") + 1)
	if r := conn.Confirm(ctx, req); r.Kind != connectors.Ambiguous {
		t.Fatalf("every record deleted: %v %s, want ambiguous", r.Kind, r.Message)
	}
}

// On a trimmed partition, a first kept record stamped before the
// attempt's start, but by less than the clock drift, may have been
// appended after the attempt's record by a producer whose clock lags: a
// miss is then unknown. So is every miss when the client has no delivery
// timeout, which bounds when the attempt began.
func TestConfirmAfterRetentionAllowsForClockDrift(t *testing.T) {
	c, _ := fakeCluster(t)
	for _, tc := range []struct {
		name     string
		delivery time.Duration
		drift    time.Duration
		want     connectors.Kind
	}{
		{"no drift", time.Second, 0, connectors.NotFound},
		{"a kept record within the drift", time.Second, time.Hour, connectors.Ambiguous},
		{"no delivery timeout", 0, 0, connectors.Ambiguous},
	} {
		opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner())}
		if tc.delivery > 0 {
			opts = append(opts, kgo.RecordDeliveryTimeout(tc.delivery))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		const p = 2
		conn, err := kafkaconn.New(kafkaconn.Config{Client: cl, Topic: topic, PartitionFor: func(string, int) int32 { return p }, ClockDrift: tc.drift})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var last int64
		for _, v := range []string{"old-1", "old-2"} {
			r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}).First()
			if err != nil {
				t.Fatal(err)
			}
			last = r.Offset
		}
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: topic, Partition: p, At: last})
		if resp, err := kadm.NewClient(cl).DeleteRecords(ctx, o); err != nil || resp.Error() != nil {
			t.Fatal(err, resp.Error())
		}
		req := connectors.Request{Action: "a", Entity: "order-1", Key: "k-" + tc.name, Attempt: 1,
			Deadline: time.Now().Add(time.Second), Data: json.RawMessage(`{}`)}
		if r := conn.Confirm(ctx, req); r.Kind != tc.want {
			t.Errorf("%s: a key never produced, the first kept record just before the attempt: %v %s, want %v", tc.name, r.Kind, r.Message, tc.want)
		}
	}
}
