package kafkaconn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/connectors/connectortest"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	kafkaconn "github.com/onceflight/onceflight/internal/connectors/kafka"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

const (
	topic      = "t"
	partitions = 3 // of topic
)

func cluster(t *testing.T) *kgo.Client {
	t.Helper()
	_, cl := fakeCluster(t)
	return cl
}

// fakeCluster is a one-broker kfake cluster with topic on 3 partitions, and a
// producing client for it.
func fakeCluster(t *testing.T) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, cl
}

func connector(t *testing.T, cl *kgo.Client, partitionFor func(string, int) int32) *kafkaconn.Connector {
	t.Helper()
	c, err := kafkaconn.New(kafkaconn.Config{Client: cl, Topic: topic, PartitionFor: partitionFor})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// effects counts the records on the topic carrying key, read to each
// partition's end offset (kafkatest.ReadAll).
func effects(t *testing.T, cl *kgo.Client, key string) int {
	t.Helper()
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	n := 0
	for p := range int32(partitions) {
		for _, r := range kafkatest.ReadAll(t, seeds, topic, p, 20*time.Second) {
			if kafkatest.HeaderValue(r, kafkaconn.HeaderKey) == key {
				n++
			}
		}
	}
	return n
}

func TestConformance(t *testing.T) {
	for name, pf := range map[string]func(string, int) int32{"client placement": nil, "PartitionFor": partitioner.ForEntity} {
		t.Run(name, func(t *testing.T) {
			connectortest.Run(t, connectortest.Features{Confirm: true}, func(t *testing.T) connectortest.Harness {
				cl := cluster(t)
				return connectortest.Harness{
					Conn:    connector(t, cl, pf),
					Effects: func(key string) int { return effects(t, cl, key) },
				}
			})
		})
	}
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

// watched records every Confirm answer and reports the first one.
type watched struct {
	*kafkaconn.Connector
	mu      sync.Mutex
	answers []connectors.Kind
	first   chan struct{}
}

func (w *watched) Confirm(ctx context.Context, req connectors.Request) connectors.Result {
	r := w.Connector.Confirm(ctx, req)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.answers = append(w.answers, r.Kind)
	if len(w.answers) == 1 {
		close(w.first)
	}
	return r
}

// Issue 7: the attempt's deadline passes while kgo's produce request is
// still at the broker. Confirm must not say not found while that produce can
// still land, or Perform executes again and both records become visible.
func TestConfirmWhileProduceOutstanding(t *testing.T) {
	for name, pf := range map[string]func(string, int) int32{"client placement": nil, "PartitionFor": partitioner.ForEntity} {
		t.Run(name, func(t *testing.T) {
			kc, cl := fakeCluster(t)
			w := &watched{Connector: connector(t, cl, pf), first: make(chan struct{})}
			// Hold every produce request at the broker until release; the
			// broker then writes it as usual.
			release := make(chan struct{})
			var once sync.Once
			releaseAll := func() { once.Do(func() { close(release) }) }
			t.Cleanup(releaseAll)
			kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				kc.SleepControl(func() { <-release })
				return nil, nil, false
			})

			req := connectors.Request{Action: "a", Entity: "order-7", Key: "k/7", Attempt: 1, FencingToken: 1, Data: json.RawMessage(`{"x":7}`)}
			p := effect.Policy{
				Timeout:        300 * time.Millisecond, // the attempt ends while its produce is held
				MaxAttempts:    3,
				ConfirmTimeout: 30 * time.Second,
				Backoff:        func() backoff.BackOff { return backoff.NewConstantBackOff(10 * time.Millisecond) },
			}
			done := make(chan effect.Decision, 1)
			go func() { done <- effect.Perform(context.Background(), w, req, p) }()
			// The first Confirm runs after attempt 1 gave up, with its produce
			// still held; only then may the produce land.
			select {
			case <-w.first:
			case d := <-done:
				t.Fatalf("perform ended without confirming: %+v", d)
			}
			releaseAll()
			d := <-done

			w.mu.Lock()
			answers := append([]connectors.Kind(nil), w.answers...)
			w.mu.Unlock()
			if answers[0] != connectors.Ambiguous {
				t.Errorf("first confirm, produce outstanding = %v, want ambiguous", answers[0])
			}
			for i, k := range answers {
				if k == connectors.NotFound {
					t.Errorf("confirm %d said not found while a produce of the key could land (answers %v)", i+1, answers)
				}
			}
			if d.Outcome != schemas.StatusSucceeded || d.Attempts != 1 {
				t.Errorf("decision = %v after %d attempts (%s %s), want succeeded by confirmation after 1 attempt", d.Outcome, d.Attempts, d.Code, d.Message)
			}
			if n := effects(t, cl, req.Key); n != 1 {
				t.Errorf("%d records carry the key, want exactly 1", n)
			}
		})
	}
}

// Issue 7: with PartitionFor, the record must be found where Execute wrote
// it after the target topic grew (a key's partition under the new count is
// another one).
func TestConfirmAfterTopicGrows(t *testing.T) {
	cl := cluster(t)
	c := connector(t, cl, partitioner.ForEntity)
	entity := ""
	for i := 0; entity == ""; i++ {
		if e := fmt.Sprintf("order-%d", i); partitioner.ForEntity(e, 3) != partitioner.ForEntity(e, 6) {
			entity = e
		}
	}
	want := partitioner.ForEntity(entity, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	execute := func(key string) location {
		t.Helper()
		req := connectors.Request{Action: "a", Entity: entity, Key: key, Attempt: 1, Deadline: time.Now().Add(5 * time.Second), Data: json.RawMessage(`{}`)}
		res := c.Execute(ctx, req)
		if res.Kind != connectors.Succeeded {
			t.Fatalf("execute %s: %v %s", key, res.Kind, res.Message)
		}
		return parseLocation(t, res.Result)
	}
	confirm := func(c *kafkaconn.Connector, key string, loc location) {
		t.Helper()
		r := c.Confirm(ctx, connectors.Request{Action: "a", Entity: entity, Key: key})
		if r.Kind != connectors.Succeeded || parseLocation(t, r.Result) != loc {
			t.Fatalf("confirm %s after the topic grew: %v %s %s, want succeeded at %+v", key, r.Kind, r.Result, r.Message, loc)
		}
	}

	before := execute("k/before")
	if before.Partition != want {
		t.Fatalf("written to partition %d, want %d", before.Partition, want)
	}
	resp, err := kadm.NewClient(cl).CreatePartitions(ctx, 3, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	// If the caller's client has the topic loaded (it produced the record),
	// it learns the new count: a placement left to its partitioner would now
	// move the entity to another partition.
	for loaded, _, _ := cl.PartitionLeader(topic, 0); loaded >= 0; {
		cl.ForceMetadataRefresh()
		if leader, _, _ := cl.PartitionLeader(topic, 5); leader >= 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the client never saw the new partitions")
		}
		time.Sleep(10 * time.Millisecond)
	}
	confirm(c, "k/before", before)

	// New work for the entity stays on its partition, and is found there.
	after := execute("k/after")
	if after.Partition != want {
		t.Fatalf("after growing, written to partition %d, want %d", after.Partition, want)
	}
	confirm(c, "k/after", after)

	// A connector started after the growth keeps the placement when told
	// the count, e.g. across a restart.
	pinned, err := kafkaconn.New(kafkaconn.Config{Client: cl, Topic: topic, PartitionFor: partitioner.ForEntity, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	confirm(pinned, "k/before", before)
	if r := pinned.Confirm(ctx, connectors.Request{Entity: entity, Key: "k/never"}); r.Kind != connectors.NotFound {
		t.Fatalf("confirm of a key never produced = %v %s, want not_found", r.Kind, r.Message)
	}
}

type location struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

func parseLocation(t *testing.T, raw json.RawMessage) location {
	t.Helper()
	var l location
	if err := json.Unmarshal(raw, &l); err != nil || l.Topic != topic {
		t.Fatalf("result %s: %v", raw, err)
	}
	return l
}
