package consumer_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/internal/apifake"
)

// newEffectService starts the fake external system of the network and
// soak tests (apifake.Effects: not idempotent, counts overlapping
// executions of an entity): every POST takes hold before its effect;
// script (nil: none) picks what a POST does from its key and the key's
// POSTs so far.
func newEffectService(t *testing.T, hold time.Duration, script func(key string, n int) apifake.Fault) *apifake.Effects {
	opts := []apifake.EffectsOption{apifake.WithDelay(func() time.Duration { return hold })}
	if script != nil {
		opts = append(opts, apifake.WithScript(script))
	}
	return apifake.NewEffects(t, opts...)
}

// effectsYAML is an action named pay.call on svc.
func effectsYAML(svc *apifake.Effects, timeout string) string {
	return fmt.Sprintf(`actions:
  pay.call:
    connector: http
    url: %[1]s
    confirm_url: %[1]s/{key}
    timeout: %[2]s
    confirm_timeout: 30s
    max_attempts: 5
`, svc.URL(""), timeout)
}

// groupJoins counts the JoinGroup requests the cluster received: a
// rebalance of the classic protocol starts with one from every member, so
// an unchanged count means no rebalance (and no member's rejoin).
func groupJoins(c *kfake.Cluster) func() int {
	var mu sync.Mutex
	n := 0
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		n++
		mu.Unlock()
		return nil, nil, false
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}
