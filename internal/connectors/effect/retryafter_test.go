package effect_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/connectors/effect"
	"github.com/onceflight/onceflight/schemas"
)

// A Retry-After that ends after give_up_after (or the command's deadline)
// is not waited out: no request may leave before it, so the wait could
// only end in the same failed connector_unavailable, later, with the
// entity's next commands held behind it all along. The call decides at
// once and the record names the Retry-After. (The context's timeout only
// keeps a failing run from waiting the hour.)
func TestRetryAfterPastTheBoundDecidesAtOnce(t *testing.T) {
	for _, deadline := range []bool{false, true} {
		conn := &busyThenOK{n: 1000, after: time.Hour}
		p := fastPolicy()
		p.GiveUpAfter = 10 * time.Minute
		opts := []effect.PerformOption{effect.WithGate(&recordingGate{})}
		bound := "give_up_after (10m0s)"
		if deadline {
			p.GiveUpAfter = 2 * time.Hour
			opts = append(opts, effect.WithNotAfter(time.Now().Add(10*time.Minute)))
			bound = "the command's deadline"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d := effect.Perform(ctx, conn, req("k"), p, opts...)
		cancel()
		if d.Outcome != schemas.StatusFailed || d.Code != schemas.CodeConnectorUnavailable || len(conn.at) != 1 ||
			!strings.Contains(d.Message, bound) || !strings.Contains(d.Message, "Retry-After") {
			t.Fatalf("deadline %v: decision %+v after %d requests", deadline, d, len(conn.at))
		}
	}
}
