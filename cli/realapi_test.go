package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRealAPISecretsNeverShown runs every command that prints an actions
// file — config validate, actions as text and JSON (the same description
// serve answers on GET /v1/actions), and the start-up error of a file with
// one secret missing — on the shipped profiles with known secrets set, and
// looks for the secrets in everything they print.
func TestRealAPISecretsNeverShown(t *testing.T) {
	secrets := map[string]string{
		"PAYMENTS_API_KEY":  "sk_test_cliSecretPay0123456",
		"MESSAGING_ACCOUNT": "AC_cliSecretAccount987",
		"MESSAGING_TOKEN":   "cliSecretToken-abcdef",
		"WEBHOOK_SECRET":    "whsec_Y2xpLXNlY3JldC13ZWJob29rLWtleQ==",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	var all strings.Builder
	for _, name := range []string{"payments", "messaging", "webhooks"} {
		file := filepath.Join("..", "examples", "apis", name+".yaml")
		for _, args := range [][]string{
			{"config", "validate", file},
			{"actions", "--config", file},
			{"actions", "--config", file, "-o", "json"},
		} {
			code, out, errOut := runCLI(args...)
			if code != exitOK {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
			all.WriteString(out + errOut)
		}
	}
	for _, want := range []string{"from ${env:PAYMENTS_API_KEY}", "password from ${env:MESSAGING_TOKEN}", "secret from ${env:WEBHOOK_SECRET}",
		"G3 holds: the API deduplicates by Idempotency-Key and can be looked up by it", "found when status == 200 && size(body.data) > 0"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the descriptions lack %q", want)
		}
	}
	// One secret missing: the error names the variable, not the others' values.
	t.Setenv("MESSAGING_TOKEN", "")
	code, out, errOut := runCLI("config", "validate", filepath.Join("..", "examples", "apis", "messaging.yaml"))
	if code != exitUsage || !strings.Contains(errOut, `messaging.yaml:17:17: action "customers.sms": field "basic_auth.password": environment variable MESSAGING_TOKEN is empty`) {
		t.Errorf("missing secret: exit %d, %q", code, errOut)
	}
	all.WriteString(out + errOut)
	for k, v := range secrets {
		if strings.Contains(all.String(), v) {
			t.Errorf("the value of %s is printed", k)
		}
	}
}
