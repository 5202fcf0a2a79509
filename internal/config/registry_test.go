package config

import (
	"strings"
	"testing"
)

func TestRegisteredKindsAndSettings(t *testing.T) {
	ok := "actions:\n  a.b:\n    connector: ledger\n    settings: {currency: EUR, limit: 5}\n"
	c, err := ParseWith("f.yaml", []byte(ok), []string{"ledger"})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Actions["a.b"].Settings; s["currency"] != "EUR" || s["limit"] != "5" {
		t.Fatalf("settings %v", s)
	}
	for _, tc := range []struct{ yaml, want string }{
		{ok, `unknown connector "ledger" (want http, kafka or noop)`},
		{"actions:\n  a.b:\n    connector: noop\n    settings: {x: 1}\n", `field "settings": only valid for a connector registered by the program`},
	} {
		if _, err := Parse("f.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	if _, err := ParseWith("f.yaml", []byte("actions:\n  a.b:\n    connector: ledger\n    settings: {x: [1]}\n"), []string{"ledger"}); err == nil || !strings.Contains(err.Error(), "settings.x") {
		t.Errorf("a non-scalar setting: %v", err)
	}
}
