package main

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
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			enc := json.NewEncoder(out)

			want := func([]byte) bool { return true }
			if len(a) == 1 {
				want = func(k []byte) bool { return string(k) == a[0] }
			}
			all, err := journalLatest(cmd.Context(), cl, kf.Topics.Journal, want)
			if err != nil {
				return err
			}
			n := 0
			for _, r := range all {
				switch {
				case entity != "" && r.Entity != entity:
					continue
				case len(a) == 0 && !((unresolved && r.Status == schemas.StatusUnresolved) || (held && r.Status == schemas.StatusHeld)):
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
