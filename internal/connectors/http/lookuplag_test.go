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

// The payments API's list ignores its filter (an API that does not know
// it, or a filter on a field that is not unique) and lists someone else's
// refund. Our attempt failed before the refund was made (a 500), so the
// refund is not ours: a found rule that accepts any listed refund
// recorded the command succeeded with another's refund id while nothing
// happened. The profile now sends our key in the refund's metadata and
// finds only a refund that carries it: a list of others' is neither found
// nor not found, unresolved for an operator. And once our refund is made
// and listed after another's, it is the one found, with its own id. Fails without the
// profile's metadata[onceflight_key] and its found rule.
func TestPaymentsProfileFilterIgnored(t *testing.T) {
	t.Setenv("PAYMENTS_API_KEY", paymentsKey)
	t.Run("others' refunds listed, ours never made: unresolved, not succeeded", func(t *testing.T) {
		api := apifake.NewPayments(t, paymentsKey)
		api.IgnoreFilter()
		a := loadProfile(t, "payments", "https://api.payments.example", api.URL())
		if d := perform(t, profileConnector(t, a), a, "refund-other", refundData); d.Outcome != schemas.StatusSucceeded {
			t.Fatalf("someone else's refund: %+v", d)
		}
		api.Inject(apifake.FailBeforeEffect, apifake.FailBeforeEffect)
		d := perform(t, profileConnector(t, a), a, "refund-ours", refundData)
		if d.Outcome == schemas.StatusSucceeded || api.Effects("refund-ours") != 0 {
			t.Fatalf("decision %+v with %d effects of ours: another's refund confirmed ours", d, api.Effects("refund-ours"))
		}
		if d.Outcome != schemas.StatusUnresolved || d.Code != schemas.CodeConfirmationTimeout {
			t.Errorf("decision %+v: want unresolved confirmation_timeout", d)
		}
	})
	t.Run("ours made and listed after another's: found, with its id", func(t *testing.T) {
		api := apifake.NewPayments(t, paymentsKey)
		api.IgnoreFilter()
		a := loadProfile(t, "payments", "https://api.payments.example", api.URL())
		perform(t, profileConnector(t, a), a, "refund-other", refundData)
		api.Inject(apifake.HangAfterEffect)
		d := perform(t, profileConnector(t, a), a, "refund-ours", refundData)
		if d.Outcome != schemas.StatusSucceeded || api.Effects("refund-ours") != 1 || string(d.Result) != `{"refund_id":"re_2","status":"succeeded"}` {
			t.Fatalf("decision %+v (result %s), %d effects", d, d.Result, api.Effects("refund-ours"))
		}
	})
	t.Run("data that tries to set the key in metadata: escaped, ours kept", func(t *testing.T) {
		api := apifake.NewPayments(t, paymentsKey)
		api.Inject(apifake.HangAfterEffect)
		a := loadProfile(t, "payments", "https://api.payments.example", api.URL())
		data := `{"charge":"ch_1","amount":500,"metadata":{"order_id":"A-1&metadata[onceflight_key]=refund-other"}}`
		d := perform(t, profileConnector(t, a), a, "refund-ours", data)
		if d.Outcome != schemas.StatusSucceeded || api.Effects("refund-ours") != 1 {
			t.Fatalf("decision %+v, %d effects: the data's metadata[onceflight_key] replaced ours", d, api.Effects("refund-ours"))
		}
	})
}
