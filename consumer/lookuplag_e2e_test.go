package consumer_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestLookuplagEndToEnd: an API that does not deduplicate, whose lookup
// shows a write only a second after it was made. The refund is made and
// its answer lost (a 500 after applying); the executor's confirmation
// asks the lookup, which says 404 while it lags. With the action's
// lookup_lag the executor asks again until the lookup shows the refund:
// one refund, succeeded by the confirmation. Without it in the executor's
// policy (consumer/actions.go building effect.Policy without LookupLag),
// the 404 is trusted at the deadline plus --clock-drift and the refund
// is made a second time.
func TestLookuplagEndToEnd(t *testing.T) {
	const lag = time.Second
	svc := apifake.NewEffects(t, apifake.WithLookupLag(lag),
		apifake.WithScript(func(_ string, n int) apifake.Fault {
			if n == 1 {
				return apifake.Fault{Status: http.StatusInternalServerError, Body: `{"message":"crashed after applying"}`}
			}
			return apifake.None
		}))
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`actions:
  payments.refund:
    connector: http
    url: %[1]s
    confirm_url: %[1]s/{key}
    timeout: 300ms
    confirm_timeout: 5s
    lookup_lag: 2s
`, svc.URL("")))
	h.Start(t.TempDir())
	h.SubmitAction("c1", "payments.refund", "order-1", "refund-1", `{"amount":3}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	rec := seen["c1"][0].Record
	if rec.Status != schemas.StatusSucceeded || rec.EstablishedBy != schemas.EstablishedByConfirmation || svc.Effects("refund-1") != 1 {
		_, effects, confirms := svc.Counts("refund-1")
		t.Fatalf("record %s established by %q, %d effects after %d confirms: want one refund, confirmed (is LookupLag in the executor's effect.Policy?)",
			rec.Status, rec.EstablishedBy, effects, confirms)
	}
}
