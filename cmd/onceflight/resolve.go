package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/schemas"
)

// ResolveAction is the CloudEvents type of an operator's resolve command.
// The executor recognises it as a control command rather than a configured
// action, and applies it to the record in the entity's partition, where it
// is ordered with every other command for that entity.
const ResolveAction = "onceflight.resolve"

// resolveData is the data of a resolve command.
type resolveData struct {
	Key    string `json:"key"`
	As     string `json:"as"`
	Reason string `json:"reason"`
	By     string `json:"by"`
}

func newResolveCmd() *cobra.Command {
	var (
		as         = newEnum("", string(schemas.StatusSucceeded), string(schemas.StatusFailed), string(schemas.StatusRejected))
		reason, by string
		timeout    time.Duration
		kf         *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   "resolve KEY --as succeeded|failed|rejected --reason TEXT",
		Short: "Record an operator's decision on an unresolved or held execution",
		Long: `Record an operator's decision on the unresolved or held execution record of
KEY (docs/events.md#settlement, docs/cli.md#resolve): for an unresolved one, what the operator found out about
the effect; for a held one, the verdict on the suspected duplicate.

The decision is published as a command (type onceflight.resolve) to the
entity's partition, so the executor applies it in order with the entity's
other commands and records it in the journal. This command waits for that
outcome and prints it; it exits 0 only if the resolution succeeded.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			key := a[0]
			if strings.TrimSpace(reason) == "" {
				return usageErrorf("--reason must not be empty: it is the audit trail of the decision")
			}
			if by == "" {
				return usageErrorf("--by is empty and the OS user name is unknown: say who decides")
			}
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			rec, ok, err := client.ScanJournal(cmd.Context(), cl, kf.Topics.Journal, key)
			cl.Close()
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("no record for key %q", key)
			}
			// Checked here for a clear message; the executor checks
			// again, since the record may change before it applies.
			if rec.Status != schemas.StatusUnresolved && rec.Status != schemas.StatusHeld {
				return fmt.Errorf("record %q is %s; only unresolved or held records can be resolved", key, rec.Status)
			}
			id := uuid.NewString()
			data, err := json.Marshal(resolveData{Key: key, As: as.v, Reason: reason, By: by})
			if err != nil {
				return err
			}
			c := schemas.Command{
				ID:     id,
				Source: defaultSource,
				Type:   ResolveAction,
				// Keyed by the record's entity: the resolution must
				// reach the partition that owns the record.
				Subject:        rec.Entity,
				IdempotencyKey: "resolve/" + key + "/" + id,
				Data:           data,
			}
			return publish(cmd.Context(), cmd.OutOrStdout(), kf, c, schemas.Binary, true, timeout)
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.Var(as, "as", "the decision: succeeded, failed or rejected")
	fs.StringVar(&reason, "reason", "", "why; recorded with the decision")
	fs.StringVar(&by, "by", defaultBy(), "who decides, recorded with the decision; defaults to the OS user name")
	fs.DurationVar(&timeout, "timeout", defaultWait, "how long to wait for the executor to apply the decision")
	_ = cmd.MarkFlagRequired("as")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

// defaultBy is the OS user running the command: the account an operator
// is logged in as is the honest default for who decided. $USER and
// $USERNAME are the fallback where the user database has no entry for the
// uid (a container running as an arbitrary uid).
func defaultBy() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	for _, v := range []string{"USER", "USERNAME"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return ""
}
