package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"brokers":          "ONCEFLIGHT_BROKERS",
		"commands-topic":   "ONCEFLIGHT_COMMANDS_TOPIC",
		"expected-version": "ONCEFLIGHT_EXPECTED_VERSION",
	} {
		if got := envName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestBindEnv(t *testing.T) {
	var brokers []string
	var wait bool
	var topic string
	root := &cobra.Command{Use: "root"}
	root.PersistentFlags().StringVar(&topic, "commands-topic", "default", "")
	cmd := &cobra.Command{Use: "sub", RunE: func(*cobra.Command, []string) error { return nil }}
	cmd.Flags().StringSliceVar(&brokers, "brokers", []string{"127.0.0.1:9092"}, "")
	cmd.Flags().BoolVar(&wait, "wait", false, "")
	root.AddCommand(cmd)
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error { return bindEnv(c) }

	t.Setenv("ONCEFLIGHT_BROKERS", "a:1,b:2")
	t.Setenv("ONCEFLIGHT_WAIT", "true")
	t.Setenv("ONCEFLIGHT_COMMANDS_TOPIC", "from-env")
	root.SetArgs([]string{"sub", "--wait=false"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(brokers, ",") != "a:1,b:2" {
		t.Errorf("brokers = %v, want the environment's", brokers)
	}
	if wait {
		t.Error("the environment overrode a flag given on the command line")
	}
	if topic != "from-env" {
		t.Errorf("inherited flag = %q, want the environment's", topic)
	}
}

// TestBadEnvNamesVariable: the command line looks right, so the message must
// point at the environment.
func TestBadEnvNamesVariable(t *testing.T) {
	for name, val := range map[string]string{
		"ONCEFLIGHT_TIMEOUT":    "soon",
		"ONCEFLIGHT_LOG_FORMAT": "xml", // inherited from the root
		"ONCEFLIGHT_MODE":       "both",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, val)
			var stdout, stderr bytes.Buffer
			code := run([]string{"submit", "--action", "a", "--entity", "e", "--brokers", "127.0.0.1:1"}, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), name) || !strings.HasPrefix(stderr.String(), "onceflight: ") {
				t.Errorf("stderr %q does not name %s", stderr.String(), name)
			}
		})
	}
}

func TestUsageExitCodes(t *testing.T) {
	for _, args := range [][]string{
		{"nosuchcommand"},
		{"submit", "--entity", "e"}, // required --action
		{"submit", "--action", "a", "--entity", "e", "--nope"}, // unknown flag
		{"status"}, // KEY missing
		{"resolve", "k", "--as", "maybe", "--reason", "r"}, // bad enum
		{"submit", "--action", "a", "--entity", "e", "--data", "[1]"},
		{"serve", "--cache-size", "1048576"},   // below the memtables it holds
		{"serve", "--memory-limit", "1000000"}, // below the executor's fixed costs
		{"serve", "--restore-parallelism", "0"},
		{"audit", "--fetch-bytes", "1000"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %q", args, code, exitUsage, stderr.String())
		}
		if strings.Contains(stderr.String(), "Flags:") {
			t.Errorf("%v: usage text printed: %q", args, stderr.String())
		}
	}
}

// TestMisspeltSubcommandIsUsageError: a command of subcommands (topics,
// config, audit) given one it does not have exits 2, as the root does for
// an unknown command; a misspelt `onceflight topics chek` in a script must
// not pass by printing the help and exiting 0.
func TestMisspeltSubcommandIsUsageError(t *testing.T) {
	groups := 0
	for _, c := range newRootCmd().Commands() {
		if !c.HasSubCommands() || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		groups++
		var stdout, stderr bytes.Buffer
		if code := run([]string{c.Name(), "no-such-subcommand"}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "no-such-subcommand") {
			t.Errorf("onceflight %s no-such-subcommand: exit %d, stderr %q; want exit %d naming it", c.Name(), code, stderr.String(), exitUsage)
		}
	}
	if groups < 3 {
		t.Fatalf("only %d commands with subcommands", groups)
	}
}

// TestStrayArgumentSaysSo: a word left over on a command that takes no
// arguments (a flag's value with a space, unquoted) is named as such, not
// as an "unknown command" of a command that has none.
func TestStrayArgumentSaysSo(t *testing.T) {
	for _, a := range [][]string{
		{"submit", "--action", "a", "--entity", "e", "--data", `{"amount":`, `25}`},
		{"outcomes", "--from-beginning", "extra"},
		{"status", "--unresolved", "k1"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(a, &stdout, &stderr)
		want := fmt.Sprintf("onceflight %s takes no arguments, got %q", a[0], a[len(a)-1])
		if code != exitUsage || !strings.Contains(stderr.String(), want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", a, code, stderr.String(), exitUsage, want)
		}
	}
}
