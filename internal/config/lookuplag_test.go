package config

import (
	"strings"
	"testing"
	"time"
)

// lookup_lag: a duration, 0s allowed (none, the default), refused where
// nothing confirms (an http action without a lookup), taken by any
// connector that confirms.
func TestLookupLag(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("c.yaml", []byte(`
actions:
  a: {connector: http, url: "https://api.example/v1/do", confirm_url: "https://api.example/v1/do/{key}", lookup_lag: 45s}
  b: {connector: kafka, topic: t, lookup_lag: 0s}
  c: {connector: noop}
`))
	if err != nil {
		t.Fatal(err)
	}
	if a, b, c := cfg.Actions["a"], cfg.Actions["b"], cfg.Actions["c"]; a.LookupLag != 45*time.Second || b.LookupLag != 0 || c.LookupLag != 0 {
		t.Errorf("lookup_lag: a %s, b %s, c %s; want 45s, 0, 0", a.LookupLag, b.LookupLag, c.LookupLag)
	}
	for _, c := range []struct{ yaml, want string }{
		{"actions:\n  x:\n    connector: noop\n    lookup_lag: -1s\n", `field "lookup_lag": must not be negative`},
		{"actions:\n  x:\n    connector: noop\n    lookup_lag: 5\n", `field "lookup_lag": invalid duration "5": a unit is required`},
		{"actions:\n  x:\n    connector: http\n    url: https://api.example/v1/do\n    lookup_lag: 5s\n",
			`field "lookup_lag": only valid for an action that confirms (confirm_url or confirm:)`},
	} {
		_, err := Parse("c.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
}
