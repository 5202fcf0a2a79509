package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// latestStatus is executor ex's latest record on the status topic, nil
// after its tombstone or when it wrote none; it checks every record on
// the way is a valid status and uncompressed (kcat reads it as it is).
func latestStatus(t *testing.T, h *onceflighttest.Harness, ex string) *schemas.ExecutorStatus {
	t.Helper()
	var last *schemas.ExecutorStatus
	for _, r := range h.ReadAll(schemas.DefaultStatusTopic, 0) {
		if r.Attrs.CompressionType() != 0 {
			t.Fatalf("status record at %d compressed (%d)", r.Offset, r.Attrs.CompressionType())
		}
		s, ok, err := schemas.DecodeStatus(r.Key, r.Value)
		if err != nil {
			t.Fatalf("status record at %d: %v", r.Offset, err)
		}
		if string(r.Key) == ex {
			last = nil
			if ok {
				last = &s
			}
		}
	}
	return last
}

// The executor publishes its status to the compacted status topic it
// creates: all partitions owned and ready, then, within a second of the
// change, halted with the reason /readyz gives; at its stop a tombstone.
func TestStatusRecordFollowsTheExecutor(t *testing.T) {
	h := onceflighttest.New(t)
	h.Tune = func(c *consumer.Config) { c.PartitionCheckInterval = 100 * time.Millisecond }
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Outcomes(1, seen, nil)
	var s *schemas.ExecutorStatus
	onceflighttest.WaitFor(t, 15*time.Second, "a status owning every partition, ready", func() bool {
		s = latestStatus(t, h, "test")
		return s != nil && s.Ready && slices.Equal(s.Owned, []int32{0, 1, 2})
	})
	if s.Halted != "" || len(s.Held) != 0 || s.Every() != consumer.Defaults().StatusInterval {
		t.Fatalf("status of a healthy executor: %+v", s)
	}
	ctx := context.Background()
	adm := kadm.NewClient(h.Client())
	rcs, err := adm.DescribeTopicConfigs(ctx, schemas.DefaultStatusTopic)
	if err != nil {
		t.Fatal(err)
	}
	policy := ""
	for _, c := range rcs[0].Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Fatalf("status topic cleanup.policy %q, want compact", policy)
	}
	if _, err := adm.CreatePartitions(ctx, 1, "onceflight.commands"); err != nil {
		t.Fatal(err)
	}
	onceflighttest.WaitFor(t, 15*time.Second, "a status saying halted", func() bool {
		s = latestStatus(t, h, "test")
		return s != nil && s.Halted != ""
	})
	if s.Ready || !strings.Contains(s.Halted, "onceflight.commands now has 4 partitions") || !strings.Contains(h.Ex.NotReady(), s.Halted) {
		t.Fatalf("halted status %+v, executor not ready: %q", s, h.Ex.NotReady())
	}
	h.Stop()
	if s := latestStatus(t, h, "test"); s != nil {
		t.Fatalf("a stopped executor's status is still there: %+v", s)
	}
}

// A partition whose buffered commands reach their bound (one running at
// a time, each waiting on a slow external system) is listed as paused in
// the status, the others not; once they drain, it is not.
func TestStatusRecordSaysPaused(t *testing.T) {
	release := make(chan struct{})
	svc := apifake.NewEffects(t, apifake.WithScript(func(string, int) apifake.Fault {
		<-release
		return apifake.None
	}))
	released := false
	let := func() {
		if !released {
			released = true
			close(release)
		}
	}
	defer let()
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  slow.call:\n    connector: http\n    url: %s\n    timeout: 5m\n", svc.URL("")))
	h.Tune = func(c *consumer.Config) { c.MaxInflightPerPartition, c.MaxBufferedPerPartition = 1, 4 }
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 30*time.Second, "executor ready", h.Ex.Ready)
	p := partitioner.ForEntity("e-0", onceflighttest.Partitions)
	for i, ent := range sameEntities(p, 10, "e") {
		h.SubmitAction(fmt.Sprintf("c%d", i), "slow.call", ent, fmt.Sprintf("k%d", i), `{}`)
	}
	var s *schemas.ExecutorStatus
	onceflighttest.WaitFor(t, 30*time.Second, "a status listing the partition paused", func() bool {
		s = latestStatus(t, h, "test")
		return s != nil && slices.Equal(s.Paused, []int32{p})
	})
	if !s.Ready || len(s.Held) != 0 || s.Halted != "" {
		t.Fatalf("paused status: %+v", s)
	}
	let()
	onceflighttest.WaitFor(t, 30*time.Second, "a status listing nothing paused", func() bool {
		s = latestStatus(t, h, "test")
		return s != nil && len(s.Paused) == 0
	})
}
