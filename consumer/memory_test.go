package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// produceBacklog writes n commands of action, spread over entities, in
// batches (the executor reads them as a backlog far larger than its
// bounds).
func produceBacklog(t *testing.T, h *onceflighttest.Harness, action string, n, entities int) []string {
	t.Helper()
	cmds := make([]schemas.Command, n)
	for i := range n {
		cmds[i] = schemas.Command{ID: fmt.Sprintf("c%d", i), Source: "test", Type: action,
			Subject: fmt.Sprintf("e-%d", i%entities), IdempotencyKey: fmt.Sprintf("k-%d", i),
			Data: json.RawMessage(`{"pad":"` + fmt.Sprintf("%0200d", i) + `"}`)}
	}
	return produceAll(t, h, cmds)
}

// produceAll writes cmds (binary mode) in batches of 500 and returns
// their ids.
func produceAll(t *testing.T, h *onceflighttest.Harness, cmds []schemas.Command) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := make([]string, 0, len(cmds))
	batch := make([]*kgo.Record, 0, 500)
	flush := func() {
		if err := h.Client().ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for _, c := range cmds {
		r, err := schemas.EncodeCommand(c, schemas.Binary)
		if err != nil {
			t.Fatal(err)
		}
		r.Topic = "onceflight.commands"
		ids = append(ids, c.ID)
		if batch = append(batch, r); len(batch) == cap(batch) {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return ids
}

// drainBacklog starts h's executor tuned by tune, with a registry of its
// own, waits until it is ready, produces a backlog of n commands and
// returns their outcomes once every command has exactly one.
func drainBacklog(t *testing.T, h *onceflighttest.Harness, action string, n, entities int, tune func(*consumer.Config)) map[string][]schemas.Outcome {
	t.Helper()
	h.Reg = prometheus.NewRegistry()
	h.Tune = tune
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 30*time.Second, "executor ready", h.Ex.Ready)
	ids := produceBacklog(t, h, action, n, entities)
	seen := readOutcomes(t, h, n)
	kafkatest.OneOutcomeEach(t, seen, ids)
	return seen
}

// readOutcomes reads n outcomes. Unlike Harness.Outcomes (30 s) it allows
// minutes: tight bounds make small transactions, and a loaded machine
// makes them slow; the bound only stops a test that hangs.
func readOutcomes(t *testing.T, h *onceflighttest.Harness, n int) map[string][]schemas.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seen := map[string][]schemas.Outcome{}
	for got := 0; got < n; {
		fs := h.Client().PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("timed out with %d of %d outcomes", got, n)
		}
		for _, r := range fs.Records() {
			if r.Topic != "onceflight.outcomes" {
				t.Fatalf("unexpected record on %s", r.Topic)
			}
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				t.Fatalf("undecodable outcome: %v", err)
			}
			seen[o.CausationID] = append(seen[o.CausationID], o)
			got++
		}
	}
	return seen
}

// peak reads onceflight_memory_in_use_peak{what}.
func peak(t *testing.T, reg *prometheus.Registry, what string) float64 {
	t.Helper()
	v, ok := kafkatest.Gauge(t, reg, "onceflight_memory_in_use_peak", "what", what)
	if !ok {
		t.Fatalf("no onceflight_memory_in_use_peak{what=%q}", what)
	}
	return v
}

// A backlog 30 times the bound is drained with what is consumed and not
// yet committed held under the configured bounds all along: the exact
// high-water marks (raised where the counts change, not sampled) never
// pass them. Before the staging bound, answers piled up in front of the
// committer without limit (~5 KB per command of the backlog); the bound
// must also be reached, or the test proves nothing.
func TestBacklogDrainsWithinMemoryBounds(t *testing.T) {
	const (
		n           = 3000
		maxBuffered = 100
		maxBytes    = 48 << 10 // ~13 staged noop answers
		poll        = 20
		inflight    = 16
	)
	h := onceflighttest.New(t)
	drainBacklog(t, h, "noop.ping", n, 500, func(c *consumer.Config) {
		c.MaxBuffered, c.MaxBufferedBytes, c.MaxPollRecords, c.MaxInflight = maxBuffered, maxBytes, poll, inflight
		c.MaxFetchBytes = 64 << 10
	})

	total, totalBytes := peak(t, h.Reg, "total_commands"), peak(t, h.Reg, "total_bytes")
	staged, stagedBytes := peak(t, h.Reg, "staged_commands"), peak(t, h.Reg, "staged_bytes")
	overlay := peak(t, h.Reg, "overlay_entries")
	t.Logf("peaks over %d commands: total %.0f commands / %.0f bytes, staged %.0f / %.0f bytes, overlay %.0f entries",
		n, total, totalBytes, staged, stagedBytes, overlay)

	// The poll loop polls only below the bound, and one poll adds at most
	// MaxPollRecords.
	if total > maxBuffered+poll {
		t.Errorf("commands consumed and not committed peaked at %.0f, over max-buffered %d + one poll of %d", total, maxBuffered, poll)
	}
	// Staged answers alone stay within the bytes bound (no single answer
	// is larger than it); buffered records add at most the bound again
	// plus one poll (a noop command here is under 1 KiB).
	if stagedBytes > maxBytes {
		t.Errorf("staged answers peaked at %.0f bytes, over max-buffered-bytes %d", stagedBytes, maxBytes)
	}
	if totalBytes > 2*maxBytes+poll<<10 {
		t.Errorf("buffered + staged peaked at %.0f bytes, over 2 × %d + one poll", totalBytes, maxBytes)
	}
	// The overlay holds staged records, the versions of entities with
	// staged records or a queue, the keys of running commands and the
	// intent of each command running (this noop action journals one):
	// docs/memory.md's bound, 2 × (max-buffered + one poll) +
	// max-inflight, plus one intent per command running, at most
	// max-buffered + one poll. With the staging bound this tight most
	// consumed commands are running, their intents committed, waiting for
	// room (waitStaged): 95 of a peak of 304 entries were intents.
	if limit := 3*(maxBuffered+poll) + inflight; overlay > float64(limit) {
		t.Errorf("overlay peaked at %.0f entries, over %d", overlay, limit)
	}
	if total < maxBuffered && totalBytes < maxBytes {
		t.Errorf("the bound was never reached (peaks %.0f commands, %.0f bytes): the backlog did not press on it", total, totalBytes)
	}
	if stagedBytes < maxBytes/2 {
		t.Errorf("staged answers peaked at %.0f bytes: the committer never had a queue to bound", stagedBytes)
	}
	// The dedupe index's presence filter is a bound of its own, shown
	// beside its cap: one generation (1.25 MiB) for a backlog this size.
	presence := peak(t, h.Reg, "dedupe_presence_bytes")
	presenceCap, ok := kafkatest.Gauge(t, h.Reg, "onceflight_memory_limit", "bound", "dedupe_presence_bytes")
	if !ok || presence <= 0 || presence > presenceCap {
		t.Errorf("presence filter %.0f bytes, cap %.0f (reported: %v): want 0 < filter ≤ cap", presence, presenceCap, ok)
	}
}

// A settle wakes the workers waiting for staged room one at a time, each
// that stages waking the next, not all of them at once: with hundreds
// waiting, waking every one at every settle (each to find the room taken
// and sleep again) doubled the CPU per command at --max-buffered 4096
// (BENCHMARKS.md, "Round 21 (lead)"). Counted, not timed: a waiter is
// woken about once, not once per settle while it waits.
func TestStagedRoomWakesWaitersInTurn(t *testing.T) {
	var waits, wakes atomic.Int64
	t.Cleanup(consumer.SetStagedWaitHook(func(woken bool) {
		if woken {
			wakes.Add(1)
		} else {
			waits.Add(1)
		}
	}))
	h := onceflighttest.New(t)
	drainBacklog(t, h, "noop.ping", 3000, 1000, func(c *consumer.Config) {
		c.MaxBuffered, c.MaxBufferedBytes, c.MaxPollRecords, c.MaxInflight = 600, 16<<10, 100, 64
		c.MaxFetchBytes = 256 << 10
	})
	w, k := waits.Load(), wakes.Load()
	t.Logf("%d waits for staged room, woken %d times (%.1f a wait)", w, k, float64(k)/float64(max(w, 1)))
	if w < 100 {
		t.Fatalf("only %d waits for staged room: the bound did not hold workers back, the test proves nothing", w)
	}
	if k > 3*w {
		t.Errorf("woken %d times in %d waits: settles wake every waiter, not one in turn", k, w)
	}
}

// Workers that wait for room among staged answers must never stop the
// committer from committing intents: with a staging bound of a few
// answers and many executions each committing an intent before its
// attempt, every command is answered and executed exactly once.
func TestTightStagingBoundWithIntents(t *testing.T) {
	const n = 300
	svc := apifake.NewEffects(t)
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  work.do:\n    connector: http\n    url: %s\n    timeout: 10s\n", svc.URL("")))
	seen := drainBacklog(t, h, "work.do", n, 50, func(c *consumer.Config) {
		c.MaxBuffered, c.MaxBufferedBytes, c.MaxPollRecords, c.MaxInflight = 10, 8<<10, 5, 32
	})
	for id, o := range seen {
		if o[0].Record.Status != schemas.StatusSucceeded {
			t.Fatalf("%s: %s", id, o[0].Record.Status)
		}
	}
	calls := svc.EffectCounts() // every POST applies: one effect per POST
	if len(calls) != n {
		t.Errorf("%d distinct keys reached the service, want %d", len(calls), n)
	}
	for k, c := range calls {
		if c != 1 {
			t.Errorf("key %q executed %d times", k, c)
		}
	}
	if sb := peak(t, h.Reg, "staged_bytes"); sb > 8<<10 {
		t.Errorf("staged answers peaked at %.0f bytes, over the bound of %d", sb, 8<<10)
	}
}
