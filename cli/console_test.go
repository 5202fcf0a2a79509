package cli

import (
	"strings"
	"testing"
)

// TestConsoleRefusesOpenAddress: the console, on its own or inside serve,
// stops at start with exit 2 when it would show the records to the network
// without authentication, and on malformed access flags.
func TestConsoleRefusesOpenAddress(t *testing.T) {
	cfg := writeConfig(t)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"console on every interface", []string{"console", "--http", "0.0.0.0:0"}, []string{"--http: 0.0.0.0:0 is not a loopback address", "token file"}},
		{"console, empty host", []string{"console", "--http", ":0"}, []string{"--http: :0 is not a loopback address"}},
		{"console, header without proxies", []string{"console", "--http-trusted-proxy-header", "X-Forwarded-User"}, []string{"go together"}},
		{"console, bad proxy role", []string{"console", "--http-trusted-proxy-header", "X-Forwarded-User", "--http-trusted-proxies", "127.0.0.1", "--http-trusted-proxy-role", "admin"},
			[]string{"--http-trusted-proxy-role", `unknown role "admin"`}},
		{"console, every peer a trusted proxy", []string{"console", "--http", "0.0.0.0:0", "--http-trusted-proxy-header", "X-Forwarded-User", "--http-trusted-proxies", "::/0", "--http-trusted-proxy-role", "operator"},
			[]string{"--http-trusted-proxies", `"::/0" is every address`}},
		{"console, audits too often", []string{"console", "--audit-every", "10s"}, []string{"--audit-every must be 0 (off) or at least 1m"}},
		{"serve --console on every interface", []string{"serve", "--console", "0.0.0.0:0"}, []string{"--console: 0.0.0.0:0 is not a loopback address"}},
	}
	for _, c := range cases {
		args := append(append([]string{}, c.args...), "--config", cfg, "--data-dir", t.TempDir(), "--brokers", deadAddr(t))
		code, _, stderr := runCLI(args...)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d (usage)\n%s", c.name, code, exitUsage, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.name, w, stderr)
			}
		}
	}
}
