package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

func newStatusCmd() *cobra.Command {
	var (
		unresolved, held bool
		entity           string
		kf               *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   "status KEY [--entity E] | status --unresolved | status --held",
		Short: "Print the execution record of an idempotency key, or list records awaiting an operator",
		Long: `Print the current execution record (docs/events.md#execution-records) of KEY as JSON, read from the
journal topic; exit 1 if the key has no record. Keys are scoped to their
entity: if KEY was used for several entities, --entity says which. With --unresolved (or
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
			oc, closeFn, err := kf.onceflightClient(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			enc := json.NewEncoder(out)

			if len(a) == 1 {
				rec, err := oc.Status(cmd.Context(), a[0], entity)
				if errors.Is(err, client.ErrNoRecord) {
					if entity != "" {
						return fmt.Errorf("no record for key %q of entity %q", a[0], entity)
					}
					return fmt.Errorf("no record for key %q", a[0])
				}
				if errors.Is(err, client.ErrAmbiguous) {
					return usageErrorf("%w: give --entity", err)
				}
				if err != nil {
					return err
				}
				return enc.Encode(rec)
			}

			var want []schemas.Status
			if unresolved {
				want = append(want, schemas.StatusUnresolved)
			}
			if held {
				want = append(want, schemas.StatusHeld)
			}
			recs, err := oc.Records(cmd.Context(), want...)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			return nil
		},
	}
	kf = addKafkaFlags(cmd)
	cmd.Flags().StringVar(&entity, "entity", "", "the key's entity (needed when the key was used for several entities)")
	cmd.Flags().BoolVar(&unresolved, "unresolved", false, "list every record whose current status is unresolved")
	cmd.Flags().BoolVar(&held, "held", false, "list every record whose current status is held")
	return cmd
}
