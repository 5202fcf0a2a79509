package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/internal/broker"
)

// defaultDataDir is where the embedded broker keeps its log unless told
// otherwise; relative, so a demo in a scratch directory stays there.
const defaultDataDir = "./onceflight-data"

func newBrokerCmd() *cobra.Command {
	var (
		listen     string
		dataDir    string
		advertise  string
		partitions int
		syncWrites bool
	)
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the embedded single-node development broker alone",
		Long: `Run the embedded Kafka-protocol broker (kfake with persistence) alone,
until SIGINT or SIGTERM. It is a single node for development, tests and
demos; in production point --brokers at Kafka or Redpanda instead.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if partitions < 0 {
				return usageErrorf("--partitions must be positive")
			}
			opts := []broker.Option{broker.WithLogger(slog.Default()), broker.DefaultPartitions(partitions)}
			if advertise != "" {
				opts = append(opts, broker.Advertise(advertise))
			}
			if syncWrites {
				opts = append(opts, broker.SyncWrites())
			}
			b, err := broker.Start(cmd.Context(), listen, dataDir, opts...)
			if err != nil {
				return err
			}
			// Close flushes the log to dataDir; it must run on every
			// way out, including a cancelled context.
			defer b.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "broker listening on %s, data in %s\n", b.Addr(), dataDir)
			<-cmd.Context().Done()
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", defaultBrokers, "host:port to listen on")
	fs.StringVar(&dataDir, "data-dir", defaultDataDir, "directory of the broker's log and state")
	fs.StringVar(&advertise, "advertise", "", "host:port clients should connect to, when not the listen address (e.g. listening on 0.0.0.0)")
	fs.IntVar(&partitions, "partitions", 0, "partition count of auto-created topics (0: kfake's default, 10)")
	fs.BoolVar(&syncWrites, "sync-writes", false, "fsync every write (survives a host crash, much slower)")
	return cmd
}
