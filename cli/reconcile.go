package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	pubclient "github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

// reconcileLookback is how far before the request the outcomes are read
// for the settlement: the broker's clock may be behind this one, and an
// outcome of the record from before the request is unresolved anyway.
const reconcileLookback = time.Minute

func newReconcileCmd() *cobra.Command {
	var (
		entity  string
		timeout time.Duration
		kf      *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   "reconcile KEY [--entity E]",
		Short: "Ask the executor to confirm an unresolved execution now",
		Long: `Ask the executor to confirm the unresolved execution record of KEY now
(docs/cli.md#reconcile), instead of waiting for the reconciler's next round:
the executor asks the action's confirm_url (or, for an idempotent_by_key
action, attempts again) and, when it learns the result, records it with
established_by "reconciler" and a confirmation asked by "operator"
(docs/events.md#evidence), and publishes the command's new outcome.

The request is an unsigned command (type onceflight.reconcile) to the
entity's partition: it decides nothing, it only asks the external system.
This command waits for the new outcome and prints it. Exit 0 for
succeeded, 3 for another status, 4 when none came within --timeout: the
confirmation learnt nothing new (the record stays unresolved), the action
cannot confirm, or another request for the key came less than half
reconcile.every before.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if timeout <= 0 {
				return usageErrorf("--timeout must be positive")
			}
			key := a[0]
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			oc, closeFn, err := kf.onceflightClient(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			rec, err := decisionTarget(ctx, oc, key, entity, decisionSpec{name: "reconcile", from: []schemas.Status{schemas.StatusUnresolved}})
			if err != nil {
				return err
			}
			since := time.Now().Add(-reconcileLookback)
			id := uuid.NewString()
			data, err := json.Marshal(map[string]string{"key": key})
			if err != nil {
				return err
			}
			// Keyed by the record's entity: the request acts only on
			// that entity's record, on the partition that owns it.
			sent, err := oc.Send(ctx, pubclient.Command{ID: id, Source: defaultSource, Action: schemas.TypeReconcile,
				Entity: rec.Entity, Key: "reconcile/" + key + "/" + id, Data: data})
			if err != nil {
				return fmt.Errorf("reconcile %q of entity %q: %w", key, rec.Entity, err)
			}
			for o, err := range oc.Outcomes(ctx, pubclient.FromTime(since)) {
				if _, ok := errors.AsType[*pubclient.DecodeError](err); ok {
					continue // another producer's event on a shared topic
				}
				if err != nil {
					if ctx.Err() != nil {
						return exitErr{exitNoOutcome, fmt.Errorf(
							"record %q of entity %q is still unresolved after %s: the confirmation learnt nothing new, the action cannot confirm, or another request for it came less than half reconcile.every before (request %s at partition %d, offset %d); see 'onceflight explain %s'",
							key, rec.Entity, timeout, id, sent.Partition, sent.Offset, key)}
					}
					return fmt.Errorf("reconcile %q: read outcomes: %w", key, err)
				}
				if o.Key == key && o.Entity == rec.Entity && o.CommandID == rec.Command.ID && o.Status != schemas.StatusUnresolved {
					return printOutcome(cmd.OutOrStdout(), o)
				}
			}
			return fmt.Errorf("reconcile %q: the outcomes read ended", key)
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&entity, "entity", "", "the entity whose record of KEY is meant (needed when several entities used KEY)")
	fs.DurationVar(&timeout, "timeout", defaultWait, "how long to wait for the confirmation's result")
	return cmd
}
