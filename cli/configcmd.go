package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/cli/internal/inspect"
)

// newConfigCmd is `onceflight config`, a group for working with the
// actions file without running an executor.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work with the actions file",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("config needs a subcommand, e.g. 'onceflight config validate onceflight.yaml'")
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Check an actions file as serve would, reporting every error",
		Long: `Load the actions file FILE exactly as 'onceflight serve --config FILE' does
(docs/configuration.md) — fields, durations, URLs, JSON Schemas — without
connecting to Kafka. Exit 0 and a summary when it is valid; exit 2 with every
error, each naming the line, the action and the field, when it is not.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			cfg, err := loadActions(cmd.Context(), a[0])
			if err != nil {
				// The same exit code serve uses for a bad config,
				// so a CI step can run validate as a pre-check.
				return exitErr{exitUsage, err}
			}
			if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: valid, %d actions\n", a[0], len(cfg.Actions)); err != nil {
				return err
			}
			// Warnings do not fail validation: a risky action can be
			// what the team chose (see 'onceflight actions').
			ws, err := inspect.Warnings(cfg, settingsOf(cmd.Context()).executorOptions()...)
			if err != nil {
				return err
			}
			for _, w := range ws {
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "warning: %s\n", w); err != nil {
					return err
				}
			}
			return nil
		},
	})
	return cmd
}
