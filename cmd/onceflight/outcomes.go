package main

import (
	"bufio"
	"context"
	"errors"
	"log/slog"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/schemas"
)

func newOutcomesCmd() *cobra.Command {
	var (
		fromBeginning, follow bool
		entity, key           string
		kf                    *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   "outcomes [--from-beginning] [--follow]",
		Short: "Print outcome events as JSON lines",
		Long: `Print outcome events (SPEC §3) as JSON lines, each the record value as published.

  --from-beginning           everything up to now, then exit
  --follow                   events published from now on, until interrupted
  --from-beginning --follow  everything, then keep following
  neither                    nothing: there is nothing between now and now

Only committed events are shown (read_committed). --entity and --key filter
by the outcome's subject and idempotency key. Order is per partition, i.e.
per entity; events of different entities may interleave.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			err = client.Read(cmd.Context(), cl, kf.Topics.Outcomes, fromBeginning, follow, func(r *kgo.Record) error {
				if entity != "" || key != "" {
					o, err := schemas.DecodeOutcome(r)
					if err != nil {
						slog.Debug("skipping undecodable outcome", "partition", r.Partition, "offset", r.Offset, "err", err)
						return nil
					}
					if (entity != "" && o.Subject != entity) || (key != "" && o.IdempotencyKey != key) {
						return nil
					}
				}
				if err := writeJSONLine(out, r.Value); err != nil {
					return err
				}
				// A follower is watched live: show each event
				// as it comes, not when the buffer fills.
				if follow {
					return out.Flush()
				}
				return nil
			})
			// Following ends only by interruption, which is the
			// normal way to stop it, not an error.
			if follow && errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.BoolVar(&fromBeginning, "from-beginning", false, "start at the oldest retained event")
	fs.BoolVar(&follow, "follow", false, "keep printing new events until interrupted")
	fs.StringVar(&entity, "entity", "", "only outcomes for this entity")
	fs.StringVar(&key, "key", "", "only outcomes for this idempotency key")
	return cmd
}
