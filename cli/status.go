package cli

import (
	"bufio"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

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
		Short: "Print the execution records of an idempotency key, or list records awaiting an operator",
		Long: `Print the current execution record (docs/events.md#execution-records) of KEY as JSON, read from the
journal topic: one JSON line per entity that used KEY (a key is scoped to
its entity; normally there is one), or with --entity only that entity's.
Exit 1 if there is none. With --unresolved (or --held) print, as JSON lines
sorted by key then entity, every record whose current status is unresolved
(or held): the ones waiting for 'onceflight resolve' (or 'onceflight approve').

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

			var all []schemas.Record
			if len(a) == 1 {
				all, err = oc.KeyRecords(cmd.Context(), a[0])
			} else {
				var st []schemas.Status
				if unresolved {
					st = append(st, schemas.StatusUnresolved)
				}
				if held {
					st = append(st, schemas.StatusHeld)
				}
				all, err = oc.Records(cmd.Context(), st...)
			}
			if err != nil {
				return err
			}
			n := 0
			for _, r := range all {
				if entity != "" && r.Entity != entity {
					continue
				}
				if err := enc.Encode(r); err != nil {
					return err
				}
				n++
			}
			if len(a) == 1 && n == 0 {
				if entity != "" {
					return fmt.Errorf("no record for key %q of entity %q", a[0], entity)
				}
				return fmt.Errorf("no record for key %q", a[0])
			}
			return nil
		},
	}
	kf = addKafkaFlags(cmd)
	cmd.Flags().BoolVar(&unresolved, "unresolved", false, "list every record whose current status is unresolved")
	cmd.Flags().BoolVar(&held, "held", false, "list every record whose current status is held")
	cmd.Flags().StringVar(&entity, "entity", "", "only the records of this entity")
	return cmd
}
