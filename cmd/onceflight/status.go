package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/schemas"
)

func newStatusCmd() *cobra.Command {
	var (
		unresolved, held bool
		kf               *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   "status KEY | status --unresolved | status --held",
		Short: "Print the execution record of an idempotency key, or list records awaiting an operator",
		Long: `Print the current execution record (docs/events.md#execution-records) of KEY as JSON, read from the
journal topic; exit 1 if the key has no record. With --unresolved (or
--held) print, as JSON lines sorted by key, every record whose current status
is unresolved (or held): the ones waiting for 'onceflight resolve'.

The journal is read in full up to its current end, so this takes time
proportional to the journal's size.`,
		Args: args(func(cmd *cobra.Command, a []string) error {
			if unresolved || held {
				return cobra.NoArgs(cmd, a)
			}
			return cobra.ExactArgs(1)(cmd, a)
		}),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			enc := json.NewEncoder(out)

			if len(a) == 1 {
				rec, ok, err := client.ScanJournal(cmd.Context(), cl, kf.Topics.Journal, a[0])
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("no record for key %q", a[0])
				}
				return enc.Encode(rec)
			}

			all, err := client.JournalLatest(cmd.Context(), cl, kf.Topics.Journal)
			if err != nil {
				return err
			}
			keys := make([]string, 0, len(all))
			for k, r := range all {
				if (unresolved && r.Status == schemas.StatusUnresolved) || (held && r.Status == schemas.StatusHeld) {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				if err := enc.Encode(all[k]); err != nil {
					return err
				}
			}
			return nil
		},
	}
	kf = addKafkaFlags(cmd)
	cmd.Flags().BoolVar(&unresolved, "unresolved", false, "list every record whose current status is unresolved")
	cmd.Flags().BoolVar(&held, "held", false, "list every record whose current status is held")
	return cmd
}
