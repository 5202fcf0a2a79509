package consumer_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
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
// (Its first version, releases and restarts only, found a release that
// re-armed a command consumed again: TestReleaseDoesNotReArmRedeliveredCommands.)
func TestSeededHistories(t *testing.T) {
	seeds := []uint64{1, 2, 3}
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
