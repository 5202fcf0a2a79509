package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/client"
)

// newExplainCmd is `onceflight explain`: the whole story of one key, for
// the person who has to say what happened to a refund, where `status`
// shows only its last state.
func newExplainCmd() *cobra.Command {
	var (
		entity   string
		trustedF string
		origin   string
		format   = newEnum("text", "text", "json")
		kf       *kafkaFlags // set below, before RunE can run
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
unresolved confirmation_timeout.

With --trusted-keys (the executors' trusted-keys file, docs/trust.md), every
journal partition's transaction seals are checked: a record of KEY that no
seal of a trusted executor key covers is marked UNSIGNED (JSON: "unsigned"
with the reason), a warning says so, it does not count as the key's current
state, and explain exits 5.

Exit codes: 0 the story was printed; 5 with --trusted-keys, a record of it
is not covered by a trusted signature; 2 usage (also KEY used for several
entities without --entity, a malformed trusted-keys file); 1 otherwise
(e.g. no record of KEY, Kafka unreachable).`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			var eo inspect.ExplainOptions
			if trustedF != "" {
				tk, err := loadTrusted(trustedF)
				if err != nil {
					return err
				}
				eo = inspect.ExplainOptions{Trusted: tk, OriginPrefix: origin}
			}
			oc, closeFn, err := kf.onceflightClient(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			s, err := inspect.Explain(cmd.Context(), oc, a[0], entity, eo)
			if errors.Is(err, client.ErrAmbiguous) {
				return usageErrorf("%w: give --entity", err)
			}
			if err != nil {
				return err
			}
			if format.String() == "json" {
				err = inspect.WriteStoryJSON(cmd.OutOrStdout(), s)
			} else {
				err = inspect.WriteStoryText(cmd.OutOrStdout(), s)
			}
			if err == nil && s.Unsigned > 0 {
				err = exitErr{exitAuditFailed, fmt.Errorf("explain: %d journal record(s) of %s are not covered by a trusted executor signature", s.Unsigned, a[0])}
			}
			return err
		},
	}
	kf = addKafkaFlags(cmd)
	cmd.Flags().StringVar(&entity, "entity", "", "the key's entity, when the key was used for several")
	cmd.Flags().StringVar(&trustedF, "trusted-keys", "", "the executors' trusted-keys file: mark the key's journal records no trusted transaction seal covers (docs/trust.md)")
	cmd.Flags().StringVar(&origin, "origin-prefix", "", "seal origin prefix with --trusted-keys (default onceflight/<journal topic>)")
	cmd.Flags().VarP(format, "output", "o", "output format: text or json")
	return cmd
}
