package effect_test

import (
	"context"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
)

// TestPerformStoppedWhileRequestInFlight: a graceful stop cancels the
// context of a request the service has received but not answered. With
// no way to confirm, that is not the connector's ambiguity but the
// executor's own stop: the attempt is interrupted (left in_progress for
// the next owner, who waits for its deadline and settles it), never
// committed unresolved ambiguous_no_confirm, which would need a person.
func TestPerformStoppedWhileRequestInFlight(t *testing.T) {
	arrived := make(chan struct{}, 1)
	// The service receives the request and answers nothing until the
	// client gives up, applying nothing.
	svc := apifake.NewEffects(t, apifake.WithScript(func(string, int) apifake.Fault {
		arrived <- struct{}{}
		return apifake.Fault{Before: true, Hang: true}
	}))
	conn, err := httpconn.New(httpconn.Config{URL: svc.URL("")})
	if err != nil {
		t.Fatal(err)
	}
	p := fastPolicy()
	p.Timeout = 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	d := effect.Perform(ctx, conn, req("k"), p)
	if d.Code != effect.CodeInterrupted || d.Attempts != 1 {
		t.Fatalf("stopped with the request in flight: %s %s (%s) after %d attempts, want %s after 1",
			d.Outcome, d.Code, d.Message, d.Attempts, effect.CodeInterrupted)
	}
}
