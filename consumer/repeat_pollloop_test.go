package consumer_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A repeat of an entity with nothing queued or running is answered by the
// poll loop itself, with no job for the entity's worker (answerRepeat),
// and answered as the worker answers it: the key's record, replayed. A
// repeat of an entity whose earlier command is still running goes to the
// entity's worker and is answered after that command, in order.
func TestRepeatOfIdleEntityAnsweredByPollLoop(t *testing.T) {
	h := onceflighttest.New(t)
	var mu sync.Mutex
	byPoll := map[string]int{}
	t.Cleanup(consumer.SetRepeatHook(func(entity string) {
		mu.Lock()
		byPoll[entity]++
		mu.Unlock()
	}))
	answeredByPoll := func(entity string) int {
		mu.Lock()
		defer mu.Unlock()
		return byPoll[entity]
	}
	// The service holds the key "slow" in flight until released.
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	svc := apifake.NewEffects(t, apifake.WithScript(func(key string, _ int) apifake.Fault {
		if key == "slow" {
			<-release
		}
		return apifake.None
	}))
	h.UseConfig(fmt.Sprintf("actions:\n  slow.call:\n    connector: http\n    url: %s\n    timeout: 60s\n", svc.URL("")))
	h.Start(t.TempDir())
	t.Cleanup(free) // before the executor stops (cleanups run last first)
	seen := map[string][]schemas.Outcome{}
	h.SubmitAction("a1", "slow.call", "idle", "k1", `{"n":1}`)
	h.SubmitAction("b1", "slow.call", "busy", "k2", `{"n":2}`)
	h.Outcomes(2, seen, nil)

	// The idle entity's repeat: answered by the poll loop.
	h.SubmitAction("a2", "slow.call", "idle", "k1", `{"n":1}`)
	h.Outcomes(3, seen, nil)
	if n := answeredByPoll("idle"); n != 1 {
		t.Fatalf("the idle entity's repeat answered by the poll loop %d times, want 1", n)
	}
	first, repeat := seen["a1"][0], seen["a2"][0]
	if !repeat.Replayed || first.Replayed || repeat.Record.Hash != first.Record.Hash ||
		repeat.Record.Command.ID != "a1" || repeat.ID == first.ID {
		t.Fatalf("repeat %+v of %+v: want the record replayed, an outcome id of its own", repeat, first)
	}

	// The busy entity: its new key b2 held in flight at the service, then
	// a repeat of k2 queued behind it.
	h.SubmitAction("b2", "slow.call", "busy", "slow", `{"n":3}`)
	onceflighttest.WaitFor(t, 30*time.Second, "b2 at the service", func() bool { return svc.InflightOf("") > 0 })
	h.SubmitAction("b3", "slow.call", "busy", "k2", `{"n":2}`)
	onceflighttest.WaitFor(t, 30*time.Second, "b3 queued behind b2", func() bool { return h.Ex.Buffered() == 2 })
	if len(seen["b3"]) != 0 || answeredByPoll("busy") != 0 {
		t.Fatal("the busy entity's repeat was answered while its earlier command runs")
	}
	free()
	h.Outcomes(5, seen, nil)
	if n := answeredByPoll("busy"); n != 0 {
		t.Fatalf("the busy entity's repeat answered by the poll loop %d times, want 0 (its worker's)", n)
	}
	if o := seen["b3"][0]; !o.Replayed || o.Record.Hash != seen["b1"][0].Record.Hash {
		t.Fatalf("b3: %+v, want b1's record replayed", o)
	}
	// In order on the outcomes topic: b2's answer, then b3's.
	var order []string
	for p := range int32(onceflighttest.Partitions) {
		for _, r := range h.ReadAll("onceflight.outcomes", p) {
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				t.Fatal(err)
			}
			if o.Record.Entity == "busy" {
				order = append(order, o.CausationID)
			}
		}
	}
	if len(order) != 3 || order[0] != "b1" || order[1] != "b2" || order[2] != "b3" {
		t.Fatalf("the busy entity's outcomes in order %v, want [b1 b2 b3]", order)
	}
}

// A revoke's drain waits for a repeat the poll loop is answering, as for a
// command a worker took off its queue (TestDrainWaitsForCommandTakenOffItsQueue):
// it counts as running from the moment the poll loop takes it.
func TestDrainWaitsForRepeatAnsweredByPollLoop(t *testing.T) {
	h := onceflighttest.New(t)
	dir := t.TempDir()
	h.Start(dir)
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "held", "k1", `{}`)
	h.Outcomes(1, seen, nil)
	h.Stop()

	entered, free := holdEntityRead(t, "held")
	var byPoll atomic.Int32
	t.Cleanup(consumer.SetRepeatHook(func(string) { byPoll.Add(1) }))
	// Started again: the overlay knows no entity, so the repeat's entity
	// state is read (the hook).
	n := h.StartNode("a", dir, onceflighttest.NodeOptions{})
	onceflighttest.WaitFor(t, 30*time.Second, "the executor ready", n.Ex.Ready)
	h.Submit("c2", "held", "k1", `{}`)
	drainFailsWhileHeld(t, n, entered, free, "nothing read the repeat's entity",
		"the drain returned while the poll loop was answering a repeat")
	onceflighttest.WaitFor(t, 30*time.Second, "the repeat answered by the poll loop", func() bool { return byPoll.Load() == 1 })
}
