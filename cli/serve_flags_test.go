package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The executor's bounds are refused with their own message before serve
// locks the data dir or starts the embedded broker: a bad flag costs no
// broker start, and leaves no broker data behind.
func TestServeRefusesBadBoundsBeforeStarting(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-buffered", "-3"}, "max-buffered: -3, must be at least 1"},
		{[]string{"--max-buffered-bytes", "-1"}, "max-buffered-bytes: -1, must be at least 1"},
		{[]string{"--max-fetch-bytes", "5"}, "max-fetch-bytes: 5, must be between"},
		{[]string{"--clock-drift", "-1s"}, "clock-drift: -1s, must not be negative"},
	} {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "onceflight.yaml")
		if err := os.WriteFile(cfg, []byte("actions:\n  noop.ping:\n    connector: noop\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI(append([]string{"serve", "--config", cfg, "--data-dir", dir, "--http", "127.0.0.1:0"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v: exit %d %q, want %d and %q", c.args, code, errOut, exitUsage, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "broker")); !os.IsNotExist(err) {
			t.Errorf("serve %v: the embedded broker started before the flag was refused (%v)", c.args, err)
		}
	}
}

// A bound given as 0, which the executor reads as unset, and the other
// values serve would replace with a default (a negative --max-data-bytes,
// ingress wait, rate or burst) are refused, naming the flag, instead of
// running with the default.
func TestServeRefusesValuesItWouldReplace(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "onceflight.yaml")
	if err := os.WriteFile(cfg, []byte("actions:\n  noop.ping:\n    connector: noop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := [][]string{
		{"--max-data-bytes", "-1"},
		{"--ingress-max-wait", "-1s"},
		{"--ingress-max-wait", "0s"},
		{"--ingress-rate", "-1"},
		{"--ingress-rate", "NaN"},
		{"--ingress-burst", "-1"},
	}
	for _, name := range unsetMeansDefault {
		cases = append(cases, []string{"--" + name, "0"})
	}
	for _, a := range cases {
		// Brokers nobody listens on: a serve that took the value fails
		// to connect (exit 1) instead of running on.
		code, _, errOut := runCLI(append([]string{"serve", "--brokers", freeAddr(t), "--config", cfg, "--data-dir", dir, "--http", "127.0.0.1:0"}, a...)...)
		if code != exitUsage || !strings.Contains(errOut, a[0]+" must") {
			t.Errorf("serve %v: exit %d %q, want %d naming %s", a, code, errOut, exitUsage, a[0])
		}
	}
}
