package consumer_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/executortest"
	"github.com/onceflight/onceflight/schemas"
)

// TestSeededHistories is the simulation of the whole executor (issue 19;
// sim_test.go): seeded histories of commands, connector answers, operator
// decisions (forged ones too), reconcile requests, restarts on the same
// and on an empty data dir, rebalances and takeovers, run against real
// executors on kfake and a real HTTP service, checked against a reference
// model of G1–G5 (simCheck). `make test` runs a few seeds; `make sim` runs
// SEEDS of them (ONCEFLIGHT_SIM_SEEDS), or replays one (SEED,
// ONCEFLIGHT_SIM_SEED), optionally only some of its steps (STEPS,
// ONCEFLIGHT_SIM_STEPS: the step numbers a failure's reproduction lists).
// The first histories (history) cover releases and restarts only, and
// keep seed 3: a release that re-armed a command consumed again.
func TestSeededHistories(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
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
	var only map[int]bool
	if s := os.Getenv("ONCEFLIGHT_SIM_STEPS"); s != "" {
		only = map[int]bool{}
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("ONCEFLIGHT_SIM_STEPS=%q: %q is not a step number", s, f)
			}
			only[n] = true
		}
	}
	total := map[string]int{}
	var mu sync.Mutex
	t.Run("releases", func(t *testing.T) { history(t, 3) })
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			kinds := simulate(t, seed, only)
			mu.Lock()
			defer mu.Unlock()
			for k, n := range kinds {
				total[k] += n
			}
		})
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(total)) {
		lines = append(lines, fmt.Sprintf("%s %d", k, total[k]))
	}
	t.Logf("%d histories; explored: %s", len(seeds), strings.Join(lines, ", "))
}

func history(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 19))
	h := executortest.New(t)
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
