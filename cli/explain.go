package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/client"
)

// newExplainCmd is `onceflight explain`: the whole story of one key, for
// the person who has to say what happened to a refund, where `status`
// shows only its last state.
func newExplainCmd() *cobra.Command {
	var (
		entity string
		format = newEnum("text", "text", "json")
		kf     *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   "explain KEY [--entity E] [-o text|json]",
		Short: "Print the timeline of an idempotency key: every record state, operator decision and outcome event",
		Long: `Print the story of KEY from the journal and the outcomes topic, both read in
full up to their current end: every state of its execution record (time,
attempt, deadline, fencing token, epoch, executor, error), operator decisions
with who and why, and every outcome event published for it (id, status,
replayed, causation id). Keys are scoped to their entity: if KEY was used for
several entities, --entity says which. Confirmations are not journal entries of
their own: one that answered shows as the next state, one that did not as
unresolved confirmation_timeout.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			oc, closeFn, err := kf.onceflightClient(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			s, err := inspect.Explain(cmd.Context(), oc, a[0], entity)
			if errors.Is(err, client.ErrAmbiguous) {
				return usageErrorf("%w: give --entity", err)
			}
			if err != nil {
				return err
			}
			if format.String() == "json" {
				return inspect.WriteStoryJSON(cmd.OutOrStdout(), s)
			}
			return inspect.WriteStoryText(cmd.OutOrStdout(), s)
		},
	}
	kf = addKafkaFlags(cmd)
	cmd.Flags().StringVar(&entity, "entity", "", "the key's entity, when the key was used for several")
	cmd.Flags().VarP(format, "output", "o", "output format: text or json")
	return cmd
}
