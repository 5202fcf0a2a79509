package consumer_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestSeededHistories (issue 19, a first step towards the simulation):
// seeded random histories of commands over two entities and three keys
// (repeats, reused keys with other data), signed releases, and restarts on
// the same data dir and on an empty one while another entity's slow
// command holds the committed offset (so restarts consume answered
// commands again), run against a real executor on kfake. Checked against
// the reference rule of G2 with positions: a key takes effect at most once
// plus once per release that found a final record, every command is
// answered, and the audit holds (one answer per command, no execution of
// a command before the release that freed its key). ONCEFLIGHT_SIM_SEED
// replays one seed; ONCEFLIGHT_SIM_SEEDS runs that many.
func TestSeededHistories(t *testing.T) {
	seeds := []uint64{1, 2, 3} // 3 catches a release that re-arms a command consumed again
	if s := os.Getenv("ONCEFLIGHT_SIM_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ONCEFLIGHT_SIM_SEED=%q: %v", s, err)
		}
		seeds = []uint64{n}
	} else if s := os.Getenv("ONCEFLIGHT_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("ONCEFLIGHT_SIM_SEEDS=%q: %v", s, err)
		}
		seeds = nil
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			history(t, seed)
		})
	}
}

func history(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 19))
	h := onceflighttest.New(t)
	ks := withKeys(t, h)
	first, dir, _ := holdWatermark(t, h)
	same, _ := entitiesOn(0, 3)
	ents := []string{first, same[2]}
	keys := []string{"k1", "k2"}
	var cmds, steps []string
	// Two restarts, in the second half: by then keys have records and
	// releases to be consumed again.
	restartAt := map[int]bool{8 + rng.IntN(8): true, 16 + rng.IntN(8): true}
	for i := range 24 {
		e, k := ents[rng.IntN(len(ents))], keys[rng.IntN(len(keys))]
		switch op := rng.IntN(4); {
		case restartAt[i]:
			h.Stop()
			where := "same data dir"
			if rng.IntN(2) == 0 {
				dir, where = t.TempDir(), "empty data dir"
			}
			h.Start(dir)
			steps = append(steps, "restart on "+where)
		case op < 3:
			id := fmt.Sprintf("c%d", i)
			data := fmt.Sprintf(`{"v":%d}`, rng.IntN(2))
			h.Submit(id, e, k, data)
			cmds = append(cmds, id)
			steps = append(steps, fmt.Sprintf("submit %s %s/%s %s", id, e, k, data))
		case op == 3:
			id := fmt.Sprintf("rel%d", i)
			h.Decide(ks, id, consumer.TypeRelease, e, schemas.Decision{Key: k, Reason: "sim", By: "sim"})
			cmds = append(cmds, id)
			steps = append(steps, fmt.Sprintf("release %s %s/%s", id, e, k))
		}
	}
	defer func() {
		if t.Failed() {
			t.Logf("history of seed %d (replay: ONCEFLIGHT_SIM_SEED=%d go test -run TestSeededHistories ./consumer/):", seed, seed)
			for _, s := range steps {
				t.Log("  " + s)
			}
		}
	}()
	seen := map[string][]schemas.Outcome{}
	until(h, seen, func() bool {
		for _, id := range cmds {
			if len(seen[id]) == 0 {
				return false
			}
		}
		return true
	})
	released := map[string]int{}
	for _, id := range cmds {
		if o := seen[id][0]; o.Record.Action == consumer.TypeRelease && o.Record.Status == schemas.StatusSucceeded {
			var r map[string]string
			if err := json.Unmarshal(o.Record.Result, &r); err == nil {
				released[o.Record.Entity+"/"+r["released"]]++
			}
		}
	}
	for _, e := range ents {
		for _, k := range keys {
			if n, max := h.EffectsOf(e, k), 1+released[e+"/"+k]; n > max {
				t.Errorf("%s/%s took effect %d times, at most %d allowed (once, plus once per release)", e, k, n, max)
			}
		}
	}
	h.Audit()
}
