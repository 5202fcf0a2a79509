package httpconn_test

import (
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/schemas"
)

// The payments API's lookup by idempotency key answers from an index that
// shows a refund some time after it was made (the profile's lookup_lag).
// A refund made, its answer lost (a timeout), and listed only a second
// later: trusted once the attempt's deadline had passed, the empty list
// refunded a second time (the fake does not deduplicate here, as the API
// does not once its key has expired). With the profile's lookup_lag the
// list is asked again until it shows the refund: one refund, succeeded by
// the lookup. Fails without lookup_lag in examples/apis/payments.yaml (or
// without effect.Policy.LookupLag's rule).
func TestPaymentsProfileLookupLag(t *testing.T) {
	t.Setenv("PAYMENTS_API_KEY", paymentsKey)
	api := apifake.NewPayments(t, paymentsKey)
	api.LagLookups(3 * profileDelay)
	api.Inject(apifake.HangAfterEffect)
	a := loadProfile(t, "payments", "https://api.payments.example", api.URL())
	if a.LookupLag < 3*profileDelay {
		t.Fatalf("payments.yaml: lookup_lag %s", a.LookupLag)
	}
	d := perform(t, profileConnector(t, a), a, "refund-1042", refundData)
	if d.Outcome != schemas.StatusSucceeded || d.EstablishedBy != schemas.EstablishedByConfirmation || api.Effects("refund-1042") != 1 {
		t.Fatalf("decision %+v, %d effects after %d calls and %d lookups: want one refund, confirmed", d, api.Effects("refund-1042"), api.Calls(), api.Lookups())
	}
}

// A refund that was never made is still executed again once the lag has
// passed: lookup_lag delays the second attempt, it does not prevent it.
func TestLookupLagThenNotFoundExecutesAgain(t *testing.T) {
	t.Setenv("PAYMENTS_API_KEY", paymentsKey)
	api := apifake.NewPayments(t, paymentsKey)
	api.Inject(apifake.FailBeforeEffect)
	a := loadProfile(t, "payments", "https://api.payments.example", api.URL())
	a.LookupLag = 2 * profileDelay // the profile's minute is longer than a test
	start := time.Now()
	d := perform(t, profileConnector(t, a), a, "refund-7", refundData)
	if d.Outcome != schemas.StatusSucceeded || api.Calls() != 2 || api.Effects("refund-7") != 1 || time.Since(start) < a.LookupLag {
		t.Fatalf("decision %+v after %d calls, %d effects, %s", d, api.Calls(), api.Effects("refund-7"), time.Since(start))
	}
}
