package consumer_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A slow entity delays only itself: commands of other entities — in the
// same partitions, consumed after the slow one — are answered while the
// slow execution is still running (docs/guarantees.md#g1-single-flight: different entities run
// concurrently; one entity runs in order).
func TestSlowEntityDoesNotBlockOthers(t *testing.T) {
	h := onceflighttest.New(t)
	release := make(chan struct{})
	svc := apifake.NewEffects(t, apifake.WithScript(func(key string, _ int) apifake.Fault {
		if strings.HasPrefix(key, "slow") { // the slow entity's: held in flight
			<-release
		}
		return apifake.None
	}))
	defer close(release)
	h.UseConfig(fmt.Sprintf("actions:\n  work.do:\n    connector: http\n    url: %s\n    timeout: 30s\n", svc.URL("")))
	h.Start(t.TempDir())

	h.SubmitAction("s1", "work.do", "slow-1", "slow-key-1", `{}`)
	h.SubmitAction("s2", "work.do", "slow-1", "slow-key-2", `{}`) // queued behind s1: same entity
	for i := range 30 {
		h.SubmitAction(fmt.Sprintf("f%d", i), "work.do", fmt.Sprintf("fast-%d", i), fmt.Sprintf("fast-key-%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(30, seen, nil)
	if len(seen["s1"])+len(seen["s2"]) != 0 {
		t.Fatalf("the slow entity answered before it was released: %+v", seen)
	}
	for i := range 30 {
		if o := seen[fmt.Sprintf("f%d", i)]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
			t.Fatalf("fast-%d: %+v", i, o)
		}
	}
	release <- struct{}{} // s1
	release <- struct{}{} // s2, only after s1
	h.Outcomes(32, seen, nil)
	if seen["s1"][0].Record.Status != schemas.StatusSucceeded || seen["s2"][0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("slow entity: %+v %+v", seen["s1"], seen["s2"])
	}
	if !seen["s1"][0].Record.FinishedAt.Before(*seen["s2"][0].Record.StartedAt) {
		t.Fatalf("one entity's commands overlapped: s1 finished %v, s2 started %v", seen["s1"][0].Record.FinishedAt, seen["s2"][0].Record.StartedAt)
	}
}
