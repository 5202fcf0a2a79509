package httpconn_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/connectors/effect"
	httpconn "github.com/onceflight/onceflight/internal/connectors/http"
	"github.com/onceflight/onceflight/schemas"
)

// The profiles of examples/apis, loaded as a user would load them (with
// the fake's address in place of the real host) and driven through
// effect.Perform, the executor's own decision function, against fakes
// of their APIs. "One effect" is counted by the fake, which does not
// deduplicate unless the profile's API does.

const (
	paymentsKey  = "sk_test_4eC39HqLyjWDarjtT1zdp7dc"
	msgAccount   = "AC0123456789abcdef"
	msgToken     = "msg-token-8c1f5a6e2b9d"
	webhookKey   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	wrongPayKey  = "sk_test_WRONGwrongWRONGwrong"
	profileDelay = 300 * time.Millisecond
)

// loadProfile parses examples/apis/<name>.yaml with host replaced by base
// and returns its only action.
func loadProfile(t *testing.T, name, host, base string) *config.Action {
	t.Helper()
	path := filepath.Join("..", "..", "..", "examples", "apis", name+".yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseWith(path, []byte(strings.ReplaceAll(string(raw), host, base)), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.Actions {
		return a
	}
	t.Fatal("no action")
	return nil
}

func profileConnector(t *testing.T, a *config.Action) *httpconn.Connector {
	t.Helper()
	c, err := httpconn.New(httpconn.Config{URL: a.URL, ConfirmURL: a.ConfirmURL, Timeout: profileDelay, API: a.API})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// profileLookupLag bounds a profile's lookup_lag (payments': a minute) in
// the tests, which would otherwise wait it out after every "not found".
const profileLookupLag = 4 * profileDelay

func profilePolicy(a *config.Action) effect.Policy {
	return effect.Policy{
		Timeout: profileDelay, MaxAttempts: 3, ConfirmTimeout: 2 * time.Second, IdempotentByKey: a.IdempotentByKey,
		LookupLag: min(a.LookupLag, profileLookupLag),
		Backoff:   func() backoff.BackOff { return backoff.NewConstantBackOff(5 * time.Millisecond) },
	}
}

func perform(t *testing.T, c *httpconn.Connector, a *config.Action, key, data string) effect.Decision {
	t.Helper()
	req := connectors.Request{Action: a.Name, Entity: "order-1042", Key: key, Attempt: 1, FencingToken: 3, Data: json.RawMessage(data)}
	return effect.Perform(context.Background(), c, req, profilePolicy(a))
}

// noSecret fails if any of secrets appears in any of the texts.
func noSecret(t *testing.T, where string, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s shows a secret: %q", where, text)
		}
	}
}

const refundData = `{"charge":"ch_1","amount":500,"metadata":{"order_id":"A-1042"}}`

func TestPaymentsProfile(t *testing.T) {
	t.Setenv("PAYMENTS_API_KEY", paymentsKey)
	for _, c := range []struct {
		name    string
		fault   apifake.Fault
		status  string // refund status the API answers
		outcome schemas.Status
		calls   int
		lookup  bool
		result  string
	}{
		{"plain success", apifake.None, "", schemas.StatusSucceeded, 1, false, `{"refund_id":"re_1","status":"succeeded"}`},
		{"timeout after the effect: listed, found", apifake.HangAfterEffect, "", schemas.StatusSucceeded, 1, true, `{"refund_id":"re_1","status":"succeeded"}`},
		{"500 before the effect: empty list, executed again", apifake.FailBeforeEffect, "", schemas.StatusSucceeded, 2, true, `{"refund_id":"re_2","status":"succeeded"}`},
		{"200 with status failed", apifake.None, "failed", schemas.StatusFailed, 1, false, ""},
		// The lookup lists the refund, but it failed: not "succeeded".
		{"timeout after a failed refund: listed, neither found nor not found", apifake.HangAfterEffect, "failed", schemas.StatusUnresolved, 1, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := apifake.NewPayments(t, paymentsKey)
			api.Status = c.status
			api.Inject(c.fault)
			a := loadProfile(t, "payments", "https://api.payments.example", api.URL())
			d := perform(t, profileConnector(t, a), a, "refund-1042", refundData)
			if d.Outcome != c.outcome || api.Calls() != c.calls || (api.Lookups() > 0) != c.lookup {
				t.Fatalf("decision %+v after %d calls, %d lookups", d, api.Calls(), api.Lookups())
			}
			switch {
			case c.outcome == schemas.StatusSucceeded:
				if api.Effects("refund-1042") != 1 || string(d.Result) != c.result {
					t.Errorf("effects %d, result %s, want 1 and %s", api.Effects("refund-1042"), d.Result, c.result)
				}
			case c.outcome == schemas.StatusUnresolved:
				if d.Code != schemas.CodeConfirmationTimeout || api.Effects("refund-1042") != 1 {
					t.Errorf("decision %+v, want unresolved confirmation_timeout", d)
				}
			case d.Code != schemas.CodeConnectorRejected || !strings.Contains(d.Message, "rejected_when holds"):
				t.Errorf("decision %+v, want connector_rejected by rejected_when", d)
			}
			for _, h := range api.Headers() {
				if h.Get("Idempotency-Key") != "refund-1042" || h.Get("Authorization") != "Bearer "+paymentsKey {
					t.Errorf("request headers %v", h)
				}
			}
		})
	}
}

// TestPaymentsWrongKey: a wrong key is the API's 401, failed and not
// retried, and the key the API quotes back is not in the message.
func TestPaymentsWrongKey(t *testing.T) {
	t.Setenv("PAYMENTS_API_KEY", wrongPayKey)
	api := apifake.NewPayments(t, paymentsKey)
	a := loadProfile(t, "payments", "https://api.payments.example", api.URL())
	d := perform(t, profileConnector(t, a), a, "refund-1", refundData)
	if d.Outcome != schemas.StatusFailed || d.Code != schemas.CodeConnectorRejected || !strings.Contains(d.Message, "HTTP 401") || api.Calls() != 1 {
		t.Fatalf("decision %+v after %d calls", d, api.Calls())
	}
	if !strings.Contains(d.Message, "Invalid API Key provided: "+httpconn.Redacted) {
		t.Errorf("message %q: want the API's words with the key redacted", d.Message)
	}
	noSecret(t, "message", d.Message, wrongPayKey, paymentsKey)
}

const smsData = `{"to":"+15551234567","text":"Your order \"A-1042\" shipped"}`

func TestMessagingProfile(t *testing.T) {
	t.Setenv("MESSAGING_ACCOUNT", msgAccount)
	t.Setenv("MESSAGING_TOKEN", msgToken)
	for _, c := range []struct {
		name    string
		fault   apifake.Fault
		data    string
		outcome schemas.Status
		calls   int
		effects int
		lookup  bool
	}{
		{"plain success", apifake.None, smsData, schemas.StatusSucceeded, 1, 1, false},
		{"timeout after the effect: found by reference", apifake.HangAfterEffect, smsData, schemas.StatusSucceeded, 1, 1, true},
		{"500 before the effect: not found, sent again", apifake.FailBeforeEffect, smsData, schemas.StatusSucceeded, 2, 1, true},
		{"unreachable number: 200 failed", apifake.None, `{"to":"` + apifake.Unreachable + `","text":"x"}`, schemas.StatusFailed, 1, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := apifake.NewMessaging(t, msgAccount, msgToken)
			api.Inject(c.fault)
			a := loadProfile(t, "messaging", "https://api.messaging.example", api.URL())
			d := perform(t, profileConnector(t, a), a, "sms-7", c.data)
			if d.Outcome != c.outcome || api.Calls() != c.calls || api.Effects("sms-7") != c.effects || (api.Lookups() > 0) != c.lookup {
				t.Fatalf("decision %+v after %d calls, %d effects, %d lookups", d, api.Calls(), api.Effects("sms-7"), api.Lookups())
			}
			if c.outcome == schemas.StatusSucceeded && !strings.HasPrefix(string(d.Result), `{"message_id":"SM`) {
				t.Errorf("result %s", d.Result)
			}
			for _, h := range api.Headers() {
				if h.Get("X-Client-Ref") != "sms-7" || h.Get("Idempotency-Key") != "" {
					t.Errorf("headers %v: want the key in X-Client-Ref only", h)
				}
			}
		})
	}
	t.Run("wrong token", func(t *testing.T) {
		t.Setenv("MESSAGING_TOKEN", "not-the-token-123")
		api := apifake.NewMessaging(t, msgAccount, msgToken)
		a := loadProfile(t, "messaging", "https://api.messaging.example", api.URL())
		d := perform(t, profileConnector(t, a), a, "sms-8", smsData)
		if d.Outcome != schemas.StatusFailed || !strings.Contains(d.Message, "HTTP 401") {
			t.Fatalf("decision %+v", d)
		}
		noSecret(t, "message", d.Message, "not-the-token-123", msgAccount)
	})
}

func TestWebhooksProfile(t *testing.T) {
	t.Setenv("WEBHOOK_SECRET", webhookKey)
	t.Run("signed, verified, delivered once", func(t *testing.T) {
		rcv := apifake.NewWebhooks(t, webhookKey)
		a := loadProfile(t, "webhooks", "https://hooks.partner.example/onceflight", rcv.URL()+"/hooks")
		d := perform(t, profileConnector(t, a), a, "hook-1", `{"order":"A-1042"}`)
		if d.Outcome != schemas.StatusSucceeded || rcv.Effects("hook-1") != 1 || string(rcv.Bodies[0]) != `{"order":"A-1042"}` {
			t.Fatalf("decision %+v, effects %d", d, rcv.Effects("hook-1"))
		}
	})
	t.Run("timeout after the effect: sent again, the receiver deduplicates by webhook-id", func(t *testing.T) {
		rcv := apifake.NewWebhooks(t, webhookKey)
		rcv.Inject(apifake.HangAfterEffect)
		a := loadProfile(t, "webhooks", "https://hooks.partner.example/onceflight", rcv.URL()+"/hooks")
		d := perform(t, profileConnector(t, a), a, "hook-2", `{"order":"A-7"}`)
		hs := rcv.Headers()
		if d.Outcome != schemas.StatusSucceeded || rcv.Calls() != 2 || rcv.Effects("hook-2") != 1 ||
			hs[0].Get("webhook-id") != "hook-2" || hs[1].Get("webhook-id") != "hook-2" {
			t.Fatalf("decision %+v after %d calls, %d effects, headers %v", d, rcv.Calls(), rcv.Effects("hook-2"), hs)
		}
	})
	t.Run("500 before the effect: sent again with the same webhook-id, delivered once", func(t *testing.T) {
		rcv := apifake.NewWebhooks(t, webhookKey)
		rcv.Inject(apifake.FailBeforeEffect)
		a := loadProfile(t, "webhooks", "https://hooks.partner.example/onceflight", rcv.URL()+"/hooks")
		d := perform(t, profileConnector(t, a), a, "hook-4", `{"order":"A-8"}`)
		hs := rcv.Headers()
		if d.Outcome != schemas.StatusSucceeded || rcv.Calls() != 2 || rcv.Effects("hook-4") != 1 ||
			hs[0].Get("webhook-id") != "hook-4" || hs[1].Get("webhook-id") != "hook-4" {
			t.Fatalf("decision %+v after %d calls, %d effects, headers %v", d, rcv.Calls(), rcv.Effects("hook-4"), hs)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		other := "whsec_" + "c2VjcmV0LW9mLWFub3RoZXItc2VuZGVy"
		t.Setenv("WEBHOOK_SECRET", other)
		rcv := apifake.NewWebhooks(t, webhookKey)
		a := loadProfile(t, "webhooks", "https://hooks.partner.example/onceflight", rcv.URL()+"/hooks")
		d := perform(t, profileConnector(t, a), a, "hook-3", `{}`)
		if d.Outcome != schemas.StatusFailed || !strings.Contains(d.Message, "HTTP 401") || rcv.Effects("hook-3") != 0 {
			t.Fatalf("decision %+v", d)
		}
		noSecret(t, "message", d.Message, other)
	})
}

// TestWebhookSignatureVector checks the signature against the Standard
// Webhooks specification's own example.
func TestWebhookSignatureVector(t *testing.T) {
	key, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := "v1," + httpconn.WebhookSignature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("signature %s, want %s", got, want)
	}
}

// TestPaymentsMissingKey: an action that sends no key at all gets the
// API's 401 as failed, not retried.
func TestPaymentsMissingKey(t *testing.T) {
	t.Setenv("PAYMENTS_API_KEY", paymentsKey)
	api := apifake.NewPayments(t, paymentsKey)
	a := loadProfile(t, "payments", "https://api.payments.example", api.URL())
	a.API.Headers = nil
	d := perform(t, profileConnector(t, a), a, "refund-2", refundData)
	if d.Outcome != schemas.StatusFailed || d.Code != schemas.CodeConnectorRejected || !strings.Contains(d.Message, "HTTP 401") ||
		!strings.Contains(d.Message, "You did not provide an API key") || api.Calls() != 1 || api.Effects("refund-2") != 0 {
		t.Fatalf("decision %+v after %d calls", d, api.Calls())
	}
}
