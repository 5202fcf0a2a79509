package kafkaconn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/connectors/connectortest"
	kafkaconn "github.com/onceflight/onceflight/connectors/kafka"
)

const topic = "t"

func cluster(t *testing.T) *kgo.Client {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func connector(t *testing.T, cl *kgo.Client, partitionFor func(string, int) int32) *kafkaconn.Connector {
	t.Helper()
	c, err := kafkaconn.New(kafkaconn.Config{Client: cl, Topic: topic, PartitionFor: partitionFor})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// effects counts the records on the topic carrying key.
func effects(t *testing.T, cl *kgo.Client, key string) int {
	t.Helper()
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	n := 0
	for ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == kafkaconn.HeaderKey && bytes.Equal(h.Value, []byte(key)) {
					n++
				}
			}
		})
	}
	return n
}

func TestConformance(t *testing.T) {
	connectortest.Run(t, connectortest.Features{Confirm: true}, func(t *testing.T) connectortest.Harness {
		cl := cluster(t)
		return connectortest.Harness{
			Conn:    connector(t, cl, nil),
			Effects: func(key string) int { return effects(t, cl, key) },
		}
	})
}

func TestExecuteRecordAndConfirmByPartition(t *testing.T) {
	cl := cluster(t)
	c := connector(t, cl, nil)
	req := connectors.Request{Action: "a", Entity: "order-1", Key: "k/1", Attempt: 1, FencingToken: 9,
		Deadline: time.Now().Add(2 * time.Second), Data: json.RawMessage(`{"x":1}`)}
	res := c.Execute(context.Background(), req)
	if res.Kind != connectors.Succeeded {
		t.Fatalf("execute: %v %s", res.Kind, res.Message)
	}
	var loc struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	}
	if err := json.Unmarshal(res.Result, &loc); err != nil || loc.Topic != topic {
		t.Fatalf("result %s: %v", res.Result, err)
	}
	right := connector(t, cl, func(string, int) int32 { return loc.Partition })
	if r := right.Confirm(context.Background(), req); r.Kind != connectors.Succeeded || !bytes.Equal(r.Result, res.Result) {
		t.Fatalf("confirm on the entity's partition: %v %s %s", r.Kind, r.Result, r.Message)
	}
	wrong := connector(t, cl, func(_ string, n int) int32 { return (loc.Partition + 1) % int32(n) })
	if r := wrong.Confirm(context.Background(), req); r.Kind != connectors.NotFound {
		t.Fatalf("confirm on another partition: %v %s", r.Kind, r.Message)
	}

	// The record carries the entity as key and both headers.
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {loc.Partition: kgo.NewOffset().At(loc.Offset)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	recs := rd.PollFetches(ctx).Records()
	if len(recs) == 0 {
		t.Fatal("record not found")
	}
	r := recs[0]
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	if string(r.Key) != "order-1" || string(r.Value) != `{"x":1}` || h[kafkaconn.HeaderKey] != "k/1" || h[kafkaconn.HeaderFencingToken] != "9" {
		t.Fatalf("record key %q value %q headers %v", r.Key, r.Value, h)
	}
}
