package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/kafkaconf"
	"github.com/onceflight/onceflight/schemas"
)

// envPrefix starts the environment variable of every flag.
const envPrefix = "ONCEFLIGHT_"

// defaultBrokers is where client commands look for Kafka when --brokers is
// not given: the address `onceflight serve` gives its embedded broker.
const defaultBrokers = "127.0.0.1:9092"

// envName is the environment variable that sets flag name: ONCEFLIGHT_ and
// the name upper-cased with dashes as underscores.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// bindEnv sets every flag of cmd (its own and the ones it inherits) that was
// not given on the command line from its environment variable, if that is
// set. Containers and systemd units configure through the environment; one
// rule for all flags means no flag is forgotten. A value the flag rejects is
// a usage error naming the variable, since the command line looks fine.
func bindEnv(cmd *cobra.Command) error {
	var err error
	visit := func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		// FlagSet.Set, not Value.Set, so the flag counts as given
		// (Changed) for required-flag checks and for commands that
		// ask whether a flag was set.
		if serr := cmd.Flags().Set(f.Name, v); serr != nil {
			err = usageErrorf("environment variable %s=%q: %w", name, v, serr)
		}
	}
	// cobra has merged the inherited persistent flags into Flags() by
	// the time a pre-run hook runs; InheritedFlags covers the rest.
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return err
}

// enumValue is a string flag restricted to a fixed set, so a typo fails at
// parse time (or names its environment variable) instead of deep in a run.
type enumValue struct {
	v       string
	allowed []string
}

func newEnum(def string, allowed ...string) *enumValue {
	return &enumValue{v: def, allowed: allowed}
}

func (e *enumValue) String() string { return e.v }
func (e *enumValue) Type() string   { return "string" }
func (e *enumValue) Set(s string) error {
	if !slices.Contains(e.allowed, s) {
		return fmt.Errorf("must be one of %s", strings.Join(e.allowed, ", "))
	}
	e.v = s
	return nil
}

// levelValue is a log level flag using slog's own level names.
type levelValue struct{ l slog.Level }

func (l *levelValue) String() string     { return strings.ToLower(l.l.String()) }
func (l *levelValue) Type() string       { return "level" }
func (l *levelValue) Set(s string) error { return l.l.UnmarshalText([]byte(s)) }

// logFlags are --log-format and --log-level, shared by every command.
type logFlags struct {
	format *enumValue
	level  levelValue
}

// logger builds the process logger. Logs go to stderr so that stdout stays
// machine-readable JSON for the client commands.
func (lf *logFlags) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lf.level.l}
	if lf.format.v == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// kafkaFlags are the flags of every command that talks to Kafka: where the
// brokers are, how to connect to them (TLS, SASL: docs/configuration.md "Kafka
// connections") and which topics to use (docs/README.md, docs/cli.md).
type kafkaFlags struct {
	Brokers []string
	Topics  schemas.Topics
	// Props are the -X key=value flags, in order; ConfigFile is
	// --kafka-config. Both are read by conn.
	Props      []string
	ConfigFile string

	conf *kafkaconf.Config // loaded by conn
}

// addKafkaFlags registers --brokers (default 127.0.0.1:9092), the
// connection properties and the topic flags on cmd.
func addKafkaFlags(cmd *cobra.Command) *kafkaFlags {
	return addKafkaFlagsDefault(cmd, []string{defaultBrokers}, "Kafka brokers, host:port,...")
}

// addKafkaFlagsDefault is addKafkaFlags with another --brokers default and
// help text, for commands (serve) where no brokers means something else.
func addKafkaFlagsDefault(cmd *cobra.Command, brokers []string, brokersHelp string) *kafkaFlags {
	kf := &kafkaFlags{}
	fs := cmd.Flags()
	fs.StringSliceVar(&kf.Brokers, "brokers", brokers, brokersHelp)
	// A string array, not a slice: a value (a password) may hold commas.
	fs.StringArrayVarP(&kf.Props, "kafka-property", "X", nil,
		"Kafka connection property key=value, repeatable, overrides --kafka-config ("+strings.Join(kafkaconf.Names(), ", ")+")")
	fs.StringVar(&kf.ConfigFile, "kafka-config", "", "Kafka connection properties file (Java/librdkafka format: key=value lines, # comments)")
	d := schemas.DefaultTopics()
	fs.StringVar(&kf.Topics.Commands, "commands-topic", d.Commands, "topic of command events")
	fs.StringVar(&kf.Topics.Outcomes, "outcomes-topic", d.Outcomes, "topic of outcome events")
	fs.StringVar(&kf.Topics.Journal, "journal-topic", d.Journal, "topic of execution records")
	fs.StringVar(&kf.Topics.Deadletter, "deadletter-topic", d.Deadletter, "topic of undecodable commands")
	fs.StringVar(&kf.Topics.Status, "status-topic", d.Status, "topic of the executors' status (held, paused, halted), compacted")
	return kf
}

// conn returns the connection options of --kafka-config and -X (none when
// neither is given), loading them on first use. A bad property is a usage
// error: the invocation, not the cluster, is wrong.
func (kf *kafkaFlags) conn() ([]kgo.Opt, error) {
	if kf.conf == nil {
		c, err := kafkaconf.Load(kf.ConfigFile, kf.Props)
		if err != nil {
			return nil, usageError{err}
		}
		kf.conf = c
	}
	return kf.conf.Opts(), nil
}

// hasConn reports whether connection properties were given.
func (kf *kafkaFlags) hasConn() bool { return kf.ConfigFile != "" || len(kf.Props) > 0 }

// client returns a Kafka client for the CLI (see client.New) with the
// connection properties, logging through the process logger. It checks
// the connection first (kafkaconf.Ping), so a wrong password or protocol
// fails now with the broker's answer instead of leaving the command to
// hang in franz-go's retries.
func (kf *kafkaFlags) client(ctx context.Context, opts ...kgo.Opt) (*kgo.Client, error) {
	brokers := slices.DeleteFunc(slices.Clone(kf.Brokers), func(s string) bool { return strings.TrimSpace(s) == "" })
	if len(brokers) == 0 {
		return nil, usageErrorf("--brokers is empty")
	}
	conn, err := kf.conn()
	if err != nil {
		return nil, err
	}
	base := append([]kgo.Opt{kgo.WithLogger(client.SlogLogger(slog.Default()))}, conn...)
	cl, err := client.New(brokers, append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	if err := kafkaconf.Ping(ctx, cl); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}
