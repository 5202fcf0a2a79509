package cli

import (
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// knownEnv lists ONCEFLIGHT_* variables that are not flags but are read on
// purpose (by the chaos and end-to-end tests that run this binary), so they
// are not reported as unknown.
var knownEnv = []string{"ONCEFLIGHT_CHAOS", "ONCEFLIGHT_E2E_RACE", "ONCEFLIGHT_TEST_LOG"}

// unknownEnv returns the ONCEFLIGHT_* variables of environ that name no
// flag of any command under root. bindEnv ignores a variable no flag reads,
// so without this a misspelt ONCEFLIGHT_BROKRES would silently leave serve
// on its development broker. Flags of every command count, not just the
// running one's: a container sets ONCEFLIGHT_EXECUTOR_ID for serve, and
// `onceflight status` run in it must not complain.
func unknownEnv(root *cobra.Command, environ []string) []string {
	known := map[string]bool{}
	for _, n := range knownEnv {
		known[n] = true
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) { known[envName(f.Name)] = true }
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) && !known[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// warnUnknownEnv logs one WARN line per unknown ONCEFLIGHT_* variable.
// A warning, not an error: a newer deployment's variable must not stop an
// older binary.
func warnUnknownEnv(cmd *cobra.Command, log *slog.Logger) {
	for _, name := range unknownEnv(cmd.Root(), os.Environ()) {
		log.Warn("unknown environment variable ignored: no flag reads it (spelling?)", "variable", name)
	}
}
