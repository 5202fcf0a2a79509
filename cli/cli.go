// Package cli is the onceflight command line (docs/cli.md) as a library:
// cmd/onceflight is only Main with no options, and a program of your own
// that needs more connector kinds is Main with WithConnector, so it gets
// everything `onceflight serve` has (data-dir lock, rebuild on corruption,
// /readyz, /metrics, the Kafka checks, the console and ingress flags, every
// other subcommand) instead of a hand-wired, weaker executor
// (examples/connector).
//
// The package only parses flags, builds components and maps errors to exit
// codes; the work happens in the packages it wires together.
//
// Exit codes: 0 success; 1 error; 2 usage or configuration error (bad flag,
// bad ONCEFLIGHT_* variable); 3 a command's outcome was not `succeeded`;
// 4 no outcome arrived within --timeout; 5 an audit check failed; 130
// interrupted by a signal (a command that runs until stopped, like serve
// or a following outcomes, ends with 0 on the first signal).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes, documented in the package comment. Scripts switch on them, so
// they never change meaning.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitNotSucceded = 3
	exitNoOutcome   = 4
	exitInterrupted = 130
)

// Main executes the command line args (without the program name) and
// returns the exit code; a main function is only os.Exit around it, so that
// deferred cleanup (signal handlers, clients closed by commands) always
// runs first. The first SIGINT or SIGTERM cancels the command's context
// (exit 130), a second exits at once; ctx ending stops the command too.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, opts ...Option) int {
	s, err := newSettings(opts)
	if err != nil {
		fmt.Fprintf(stderr, "onceflight: %s\n", err)
		return exitError
	}
	ctx, stop := signalContext(withSettings(ctx, s), stderr)
	defer stop()

	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if context.Cause(ctx) == errInterrupted && code == exitError {
		code = exitInterrupted
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintf(stderr, "onceflight: %s\n", msg)
	}
	if code == exitUsage {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

func newRootCmd() *cobra.Command {
	lf := &logFlags{format: newEnum("text", "text", "json"), level: levelValue{slog.LevelInfo}}
	root := &cobra.Command{
		Use:   "onceflight",
		Short: "Execute side effects from Kafka commands at most once per key, one at a time per entity",
		Long: `Onceflight executes command events from Kafka through connectors and
publishes one outcome event per command. Every flag can also be set with an
environment variable ONCEFLIGHT_<FLAG> (upper case, dashes as underscores,
e.g. ONCEFLIGHT_BROKERS); a flag given on the command line wins.

The reference (events, guarantees, connectors, configuration, CLI, HTTP) is
docs/ in the source repository.`,
		// Runtime errors are printed once, by run, without the usage
		// text that would bury them.
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			slog.SetDefault(lf.logger(cmd.ErrOrStderr()))
			warnUnknownEnv(cmd, slog.Default())
			return nil
		},
	}
	root.PersistentFlags().Var(lf.format, "log-format", "log format: text or json")
	root.PersistentFlags().Var(&lf.level, "log-level", "log level: debug, info, warn or error")
	// Flag errors are usage errors (exit 2), whichever command has them.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newServeCmd(),
		newBrokerCmd(),
		newSubmitCmd(),
		newOutcomesCmd(),
		newStatusCmd(),
		newResolveCmd(),
		newApproveCmd(),
		newReleaseCmd(),
		newReconcileCmd(),
		newKeygenCmd(),
		newDemoCmd(),
		newAuditCmd(),
		newVersionCmd(),
		newConfigCmd(),
		newActionsCmd(),
		newExplainCmd(),
		newTopicsCmd(),
		newConsoleCmd(),
	)
	// --version prints what `onceflight version` prints.
	root.Version = readBuildInfo().String()
	root.SetVersionTemplate("{{.Version}}\n")
	// Declared here only for its help text; cobra handles it.
	root.Flags().BoolP("version", "v", false, "print the version, VCS revision and Go version")
	setExamples(root)
	return root
}

// usageError marks an error as the user's invocation being wrong (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitErr carries a specific exit code; its message may be empty when the
// command has already said everything on stdout.
type exitErr struct {
	code int
	err  error
}

func (e exitErr) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}
func (e exitErr) Unwrap() error { return e.err }

func exitCode(err error) int {
	if ee, ok := errors.AsType[exitErr](err); ok {
		return ee.code
	}
	if _, ok := errors.AsType[usageError](err); ok {
		return exitUsage
	}
	// cobra reports these without a type to match on.
	msg := err.Error()
	for _, p := range []string{"unknown command", "required flag(s)", "if any flags in the group", "unknown flag", "unknown shorthand flag"} {
		if strings.HasPrefix(msg, p) {
			return exitUsage
		}
	}
	return exitError
}

// args wraps a cobra argument validator so that its errors are usage errors.
func args(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := v(cmd, a); err != nil {
			// cobra.NoArgs calls a stray word an "unknown command",
			// which misleads on a command that has none: the word is
			// mostly a flag's value with a space, unquoted
			// (--data {"amount": 25}).
			if len(a) > 0 && !cmd.HasSubCommands() && strings.HasPrefix(err.Error(), "unknown command") {
				err = fmt.Errorf("%s takes no arguments, got %q (quote a flag's value that has spaces)", cmd.CommandPath(), a[0])
			}
			return usageError{err}
		}
		return nil
	}
}

// errInterrupted is the cause of the command context's cancellation when a
// signal asked us to stop.
var errInterrupted = errors.New("interrupted")

// signalContext returns a context that the first SIGINT or SIGTERM cancels,
// so commands can shut down in order (flush, commit, close the broker). A
// second signal exits at once with 130: an operator who presses Ctrl-C twice
// wants out, even if a graceful close hangs on an unreachable broker.
func signalContext(parent context.Context, stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			slog.Info("shutting down; signal again to exit immediately", "signal", s.String())
			cancel(errInterrupted)
		case <-done:
			return
		}
		select {
		case <-sigs:
			fmt.Fprintln(stderr, "onceflight: second signal, exiting immediately")
			os.Exit(exitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}
