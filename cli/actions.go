package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/schemas"
)

// newActionsCmd is `onceflight actions`: what protects each configured
// action, derived from the executor's own construction of it, so a team
// sees before the first refund which guarantees rest on the external system.
func newActionsCmd() *cobra.Command {
	var (
		configPath   string
		maxDataBytes int
		format       = newEnum("table", "table", "json")
	)
	cmd := &cobra.Command{
		Use:   "actions [ACTION] [--config F] [-o table|json]",
		Short: "Describe what protects each configured action: identity, limits, answers, guarantees, warnings",
		Long: `Load the actions file (as serve does, without connecting to Kafka) and describe,
for every action or only ACTION: its connector and endpoints, how the operation
identity is formed (key, scope, fingerprint, unique_by), its limits, what the
executor does on each kind of connector answer (timeout, 5xx, 4xx, 429,
connection refused), which of G1–G3 hold by Onceflight alone and which rely
on the external system, and warnings for risky combinations.`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			cfg, err := loadActions(cmd.Context(), configPath)
			if err != nil {
				return exitErr{exitUsage, err}
			}
			if len(a) == 1 {
				act, ok := cfg.Action(a[0])
				if !ok {
					return fmt.Errorf("no action %q in %s", a[0], configPath)
				}
				cfg.Actions = map[string]*config.Action{a[0]: act}
			}
			acts, err := inspect.Describe(cfg, maxDataBytes, settingsOf(cmd.Context()).executorOptions()...)
			if err != nil {
				return fmt.Errorf("describe %s: %w", configPath, err)
			}
			if format.String() == "json" {
				return inspect.WriteJSON(cmd.OutOrStdout(), acts)
			}
			return inspect.WriteText(cmd.OutOrStdout(), acts)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configPath, "config", config.DefaultPath, "actions file (docs/configuration.md)")
	fs.IntVar(&maxDataBytes, "max-data-bytes", schemas.DefaultMaxDataBytes, "the executor's --max-data-bytes, shown as the data limit")
	fs.VarP(format, "output", "o", "output format: table or json")
	return cmd
}
