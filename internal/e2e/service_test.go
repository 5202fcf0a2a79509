package e2e

import (
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
)

// newService starts the fake external system every e2e test calls through
// the http connector (apifake.Effects): not idempotent, its behaviour
// written in the keys (apifake.KeyScript), checking fencing tokens, each
// executor on its own path. partitions is the commands topic's partition
// count (noted in each event), delay (nil: none) how long an effect takes.
func newService(t *testing.T, partitions int, delay func() time.Duration) *apifake.Effects {
	t.Helper()
	opts := []apifake.EffectsOption{apifake.WithScript(apifake.KeyScript), apifake.WithConfirmScript(apifake.KeyConfirmScript),
		apifake.WithFencing(), apifake.WithPartitions(partitions)}
	if delay != nil {
		opts = append(opts, apifake.WithDelay(delay))
	}
	return apifake.NewEffects(t, opts...)
}

// httpAction is an http connector action calling the service as ex.
func httpAction(s *apifake.Effects, name, ex string, confirm bool) action {
	a := action{name: name, connector: "http", url: s.URL(ex)}
	if confirm {
		a.confirmURL = s.URL(ex) + "/{key}"
	}
	return a
}
