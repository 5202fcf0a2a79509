package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// sameEntities returns n entity names of partition p other than skip.
func sameEntities(p int32, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		ent := fmt.Sprintf("%s-%d", prefix, i)
		if partitioner.ForEntity(ent, onceflighttest.Partitions) == p {
			out = append(out, ent)
		}
	}
	return out
}

// produceCommands writes noop.ping commands id<i> of entity for i in
// [from, to).
func produceCommands(t *testing.T, h *onceflighttest.Harness, idPrefix, entity string, from, to int) []string {
	t.Helper()
	cmds := make([]schemas.Command, 0, to-from)
	for i := from; i < to; i++ {
		id := fmt.Sprintf("%s%d", idPrefix, i)
		cmds = append(cmds, schemas.Command{ID: id, Source: "test", Type: "noop.ping", Subject: entity,
			IdempotencyKey: "k-" + id, Data: json.RawMessage(`{}`)})
	}
	return produceAll(t, h, cmds)
}

// readUntilAnswered reads outcomes into seen until every id has one (a
// republication of an answer after a restart is read too).
func readUntilAnswered(t *testing.T, h *onceflighttest.Harness, seen map[string][]schemas.Outcome, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	missing := 0
	for _, id := range ids {
		if len(seen[id]) == 0 {
			missing++
		}
	}
	for missing > 0 {
		fs := h.Client().PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("timed out with %d of %d commands unanswered", missing, len(ids))
		}
		for _, r := range fs.Records() {
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				t.Fatalf("undecodable outcome on %s: %v", r.Topic, err)
			}
			if len(seen[o.CausationID]) == 0 {
				missing--
			}
			seen[o.CausationID] = append(seen[o.CausationID], o)
		}
	}
}

// A hot entity with 10 000 commands queued behind a running one does not
// hold up the other entities of its partition: the executor reads past
// the hot entity's commands, remembering only their offsets, and 40
// other entities of the partition are answered while the hot entity's
// first command is still running (it is held by the external system, so
// this is no race: not one hot command can be answered before it is let
// go). Then the hot entity drains in its order, each command answered
// once, with the commands held in memory within their bounds all along.
// Before, the partition was paused as soon as the hot entity's queue was
// full, and the 40 waited for the whole backlog.
func TestHotEntityDoesNotBlockItsPartition(t *testing.T) {
	const (
		hotN        = 10000
		others      = 40
		perEntity   = 50
		maxBuffered = 400
		poll        = 100
	)
	release := make(chan struct{})
	// Every POST is held in flight until released.
	svc := apifake.NewEffects(t, apifake.WithScript(func(string, int) apifake.Fault {
		<-release
		return apifake.None
	}))
	var once atomic.Bool
	let := func() {
		if once.CompareAndSwap(false, true) {
			close(release)
		}
	}
	defer let()

	h := onceflighttest.New(t)
	// noop.ping without an effects file: the test counts outcomes, not
	// effects, and the file's fsync per effect made the hot entity's
	// 10 000 commands, run one at a time, take ~30 s (90 s in make test).
	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    timeout: 500ms\n"+
		"  slow.call:\n    connector: http\n    url: %s\n    timeout: 5m\n", svc.URL("")))
	h.Reg = prometheus.NewRegistry()
	h.Tune = func(c *consumer.Config) {
		c.MaxBuffered, c.MaxBufferedPerEntity, c.MaxPollRecords = maxBuffered, perEntity, poll
	}
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 30*time.Second, "executor ready", h.Ex.Ready)

	hotP := partitioner.ForEntity("hot", onceflighttest.Partitions)
	h.SubmitAction("hot0", "slow.call", "hot", "k-hot0", `{}`)
	onceflighttest.WaitFor(t, 30*time.Second, "the hot entity's first command running", func() bool { return svc.InflightOf("") > 0 })
	hotIDs := append([]string{"hot0"}, produceCommands(t, h, "hot", "hot", 1, hotN)...)
	var otherIDs []string
	for _, ent := range sameEntities(hotP, others, "cold") {
		otherIDs = append(otherIDs, produceCommands(t, h, ent+"-", ent, 0, 1)...)
	}

	seen := map[string][]schemas.Outcome{}
	readUntilAnswered(t, h, seen, otherIDs)
	for _, id := range hotIDs {
		if len(seen[id]) > 0 {
			t.Fatalf("hot command %s answered while the hot entity's first command is held", id)
		}
	}
	skippedPeak := peak(t, h.Reg, "skipped_commands")
	if skippedPeak < hotN-perEntity-maxBuffered {
		t.Fatalf("skipped commands peaked at %.0f: the hot entity's backlog was not read past", skippedPeak)
	}

	let()
	readUntilAnswered(t, h, seen, hotIDs)
	kafkatest.OneOutcomeEach(t, seen, append(hotIDs, otherIDs...))

	// The hot entity's commands ran in their order: the outcomes of one
	// entity are published in the order they were decided.
	checkEntityOrder(t, h, "hot", hotIDs)

	// Memory within its stated bounds (docs/memory.md): commands held,
	// buffered + staged, at most max-buffered + one poll + one refill of
	// max-buffered-per-entity; skipped offsets at most what was consumed
	// and under max-skipped-per-partition.
	total := peak(t, h.Reg, "total_commands")
	t.Logf("peaks: total %.0f commands, skipped %.0f, buffered %.0f", total, skippedPeak, peak(t, h.Reg, "buffered_commands"))
	if limit := float64(maxBuffered + poll + perEntity); total > limit {
		t.Errorf("commands held peaked at %.0f, over %.0f", total, limit)
	}
	if skippedPeak > hotN || skippedPeak > float64(consumer.Defaults().MaxSkippedPerPartition) {
		t.Errorf("skipped commands peaked at %.0f", skippedPeak)
	}
}

// checkEntityOrder checks that entity's outcomes appear in the outcomes
// topic in the order of ids (the commands' order).
func checkEntityOrder(t *testing.T, h *onceflighttest.Harness, entity string, ids []string) {
	t.Helper()
	pos := make(map[string]int, len(ids))
	for i, id := range ids {
		pos[id] = i
	}
	last := -1
	for p := range int32(onceflighttest.Partitions) {
		for _, r := range h.ReadAll("onceflight.outcomes", p) {
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				t.Fatal(err)
			}
			i, ok := pos[o.CausationID]
			if !ok || o.Replayed {
				continue
			}
			if i < last {
				t.Fatalf("entity %s: command %s answered after %s", entity, o.CausationID, ids[last])
			}
			last = i
		}
	}
}

// A restart while a hot entity's skipped commands are being read again
// answers every command once: the skipped commands' offsets held the
// committed watermark, so the new run consumes them again, and the audit
// finds nothing executed or answered twice.
func TestRestartWhileDrainingSkippedCommands(t *testing.T) {
	const (
		hotN   = 3000
		others = 40
		each   = 20
	)
	h := onceflighttest.New(t)
	h.Reg = prometheus.NewRegistry()
	h.Tune = func(c *consumer.Config) {
		c.MaxBuffered, c.MaxBufferedPerEntity, c.MaxPollRecords = 300, 20, 50
	}
	dir := t.TempDir()
	h.Start(dir)
	onceflighttest.WaitFor(t, 30*time.Second, "executor ready", h.Ex.Ready)
	hotP := partitioner.ForEntity("hot", onceflighttest.Partitions)
	ids := produceCommands(t, h, "hot", "hot", 0, hotN)
	for _, ent := range sameEntities(hotP, others, "cold") {
		ids = append(ids, produceCommands(t, h, ent+"-", ent, 0, each)...)
	}
	seen := map[string][]schemas.Outcome{}
	// Stop once part of the hot backlog is answered (it drains last).
	readUntilAnswered(t, h, seen, ids[:hotN/3])
	if peak(t, h.Reg, "skipped_commands") == 0 {
		t.Fatal("nothing was skipped: the test does not exercise reading past a hot entity")
	}
	h.Stop()
	h.Reg = prometheus.NewRegistry()
	h.Start(dir)
	readUntilAnswered(t, h, seen, ids)
	kafkatest.OneOutcomeEach(t, seen, ids)
	effects := h.EffectCount()
	for _, id := range ids {
		if n := effects["k-"+id]; n != 1 {
			t.Fatalf("command %s executed %d times", id, n)
		}
	}
	checkEntityOrder(t, h, "hot", ids[:hotN])
	h.Audit()
}

// A refill's fetch is sized by the span of offsets it reads again, not by
// the partition: a hot entity's contiguous skipped commands are read
// without the rest of its backlog; offsets spread over other entities'
// records get up to max(--max-message-bytes, 1 MiB), as every refill had.
func TestRefetchSizedBySpan(t *testing.T) {
	run := func(first, n int64) []int64 {
		offs := make([]int64, n)
		for i := range offs {
			offs[i] = first + int64(i)
		}
		return offs
	}
	for _, c := range []struct {
		name       string
		offs       []int64
		maxMessage int
		want       int32
	}{
		{"one", []int64{7}, 1 << 20, 64 << 10},
		{"a run of 50", run(1000, 50), 1 << 20, 64 << 10},
		{"a run of 200", run(1000, 200), 1 << 20, 200 << 10},
		{"spread", []int64{10, 5000, 90000}, 1 << 20, 1 << 20},
		{"spread, large messages", []int64{10, 5000, 90000}, 8 << 20, 8 << 20},
		{"far apart", []int64{0, 1 << 62}, 1 << 20, 1 << 20},
	} {
		if got := consumer.RefetchBytes(c.offs, c.maxMessage); got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, got, c.want)
		}
	}
}
