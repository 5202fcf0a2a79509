package effect_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/connectors"
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

// inFlightForever answers every request as an API does while an earlier
// request with the key is still running (Stripe's 409).
type inFlightForever struct{ n int }

func (c *inFlightForever) Execute(context.Context, connectors.Request) connectors.Result {
	c.n++
	return connectors.Result{Kind: connectors.Unavailable, Message: "HTTP 409: a request with this key is in progress", InFlight: true}
}

// A system that says an earlier request with the key is still running
// (InFlight) until the bound passes leaves the key unresolved, not failed:
// that request may yet take effect (G3). A plain "not done" still fails.
func TestInFlightUntilTheBoundIsUnresolved(t *testing.T) {
	p := fastPolicy()
	p.GiveUpAfter = 50 * time.Millisecond
	p.IdempotentByKey = true
	conn := &inFlightForever{}
	d := effect.Perform(context.Background(), conn, req("k"), p)
	if d.Outcome != schemas.StatusUnresolved || d.Code != schemas.CodeAmbiguous || conn.n < 2 || !strings.Contains(d.Message, "409") {
		t.Fatalf("in flight until give_up_after: decision %+v after %d requests, want unresolved ambiguous after several", d, conn.n)
	}
}
