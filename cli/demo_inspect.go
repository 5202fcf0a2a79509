package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/onceflight/onceflight/cli/internal/inspect"
	pubclient "github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/internal/config"
)

// demoInspect ends the demo with what a user inspects next: what protects
// each of its actions (`onceflight actions`) and the story of the key that
// went unresolved and was resolved by an operator (`onceflight explain`).
func demoInspect(ctx context.Context, out io.Writer, brokers []string, cfg *config.Config, maxDataBytes int, keys ...string) error {
	acts, err := inspect.Describe(cfg, maxDataBytes, settingsOf(ctx).executorOptions()...)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\n$ onceflight actions")
	if err := inspect.WriteText(out, acts); err != nil {
		return err
	}
	oc, err := pubclient.New(pubclient.WithBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("demo client: %w", err)
	}
	defer oc.Close()
	for _, key := range keys {
		s, err := inspect.Explain(ctx, oc, key, "")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n$ onceflight explain %s\n", key)
		if err := inspect.WriteStoryText(out, s); err != nil {
			return err
		}
	}
	return nil
}
