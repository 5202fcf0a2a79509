package consumer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// docs/events.md#execution-records: past dedupe_retention a repeat is rejected key_expired (the
// result is no longer kept, and executing again silently would be wrong);
// past key_memory the key is forgotten and a command with it is new work.
func TestRetentionAndKeyMemory(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("dedupe_retention: 1s\nkey_memory: 3s\nactions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n", h.Effects))
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}

	h.Submit("r1", "order-1", "k1", `{}`)
	h.Outcomes(1, seen, nil)
	if seen["r1"][0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("first: %+v", seen["r1"][0].Record)
	}
	h.Submit("r2", "order-1", "k1", `{}`)
	h.Outcomes(2, seen, nil)
	if !seen["r2"][0].Replayed {
		t.Fatalf("repeat within retention: %+v", seen["r2"][0])
	}

	time.Sleep(1500 * time.Millisecond)
	h.Submit("r3", "order-1", "k1", `{}`)
	h.Outcomes(3, seen, nil)
	if e := seen["r3"][0].Record.Error; seen["r3"][0].Record.Status != schemas.StatusRejected || e == nil || e.Code != schemas.CodeKeyExpired {
		t.Fatalf("repeat past retention: %+v", seen["r3"][0].Record)
	}

	time.Sleep(2 * time.Second)
	h.Submit("r4", "order-1", "k1", `{}`)
	h.Outcomes(4, seen, nil)
	if o := seen["r4"][0]; o.Replayed || o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("past key_memory: %+v", o)
	}
	if n := h.EffectCount()["k1"]; n != 2 {
		t.Fatalf("k1 executed %d times, want 2 (once, then again after key_memory)", n)
	}
}
