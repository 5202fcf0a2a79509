package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/topics"
)

// exitTopicsNeedWork: `topics check` found settings this build cannot run
// with (`topics apply` raises what it can).
const exitTopicsNeedWork = 6

// newTopicsCmd is `onceflight topics check|apply`: the upgrade path for a
// user who is not a Kafka administrator. serve refuses topics whose
// settings would lose journal records (internal/topics); these commands
// show the same rows and raise what can be raised without losing anything.
func newTopicsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics check|apply",
		Short: "Check the topics' settings against what this build needs, and raise them",
		Long: `Check (read-only) or raise the settings of the four topics that serve needs:
max.message.bytes of every topic (at least --max-message-bytes), and the
journal's cleanup.policy (delete), retention.ms (at least key_memory +
dedupe_retention + 1 day, from --config) and retention.bytes (-1).

'topics apply' changes only what can be raised through the admin API
(incremental alter configs): it never lowers a setting, never deletes a
topic or a record, and prints what it changed. A compacted journal must be
changed by hand. Topics that do not exist are left to serve, which creates
them with these settings.`,
		// Runnable, so that a misspelt subcommand is refused (exit 2)
		// instead of answered with the help and exit 0, as config does.
		Args: args(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return usageErrorf("topics needs a subcommand: 'onceflight topics check' or 'onceflight topics apply'")
		},
	}
	cmd.AddCommand(newTopicsSubCmd("check"), newTopicsSubCmd("apply"))
	return cmd
}

func newTopicsSubCmd(verb string) *cobra.Command {
	var (
		configPath  string
		maxMsgBytes int
		kf          *kafkaFlags
	)
	c := &cobra.Command{
		Use:   verb,
		Short: map[string]string{"check": "Print each topic setting this build needs, as found, as a table (read-only; exit 6 when one is wrong)", "apply": "Raise the topic settings this build needs (never lowers, never deletes), and print what changed"}[verb],
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadActions(cmd.Context(), configPath)
			if err != nil {
				return usageError{err}
			}
			if maxMsgBytes <= 0 {
				return usageErrorf("--max-message-bytes must be positive, got %d", maxMsgBytes)
			}
			needs := topics.Needs{Topics: kf.Topics, MaxMessageBytes: maxMsgBytes,
				JournalRetention: cfg.KeyMemory + cfg.DedupeRetention + topics.JournalMargin}
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			rows, err := checkTopics(cmd, adm, needs)
			if err != nil {
				return err
			}
			if verb == "check" {
				printTopicRows(cmd.OutOrStdout(), rows)
				if bad := countBad(rows); bad > 0 {
					return exitErr{exitTopicsNeedWork, fmt.Errorf("%d topic setting(s) need a change: `onceflight topics apply` raises what it can", bad)}
				}
				return nil
			}
			changed, manual, err := applyTopics(cmd, adm, rows)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(changed) == 0 && len(manual) == 0 {
				fmt.Fprintln(out, "nothing to change: every topic setting is what this build needs")
				return nil
			}
			for _, s := range changed {
				fmt.Fprintf(out, "changed %s %s: %s -> %s\n", s.Topic, s.Name, s.Found, s.Raise)
			}
			for _, s := range manual {
				fmt.Fprintf(out, "NOT changed %s %s: %s\n", s.Topic, s.Name, s.Problem())
			}
			if len(manual) > 0 {
				return exitErr{exitTopicsNeedWork, fmt.Errorf("%d setting(s) must be changed by hand", len(manual))}
			}
			return nil
		},
	}
	fs := c.Flags()
	fs.StringVar(&configPath, "config", config.DefaultPath, "actions file (docs/configuration.md): key_memory and dedupe_retention decide the journal's retention")
	fs.IntVar(&maxMsgBytes, "max-message-bytes", consumer.Defaults().MaxMessageBytes, "the producer's record limit serve runs with (serve --max-message-bytes)")
	kf = addKafkaFlags(c)
	return c
}

// checkTopics reads the settings of the topics that exist. A missing
// topic is not a problem here: serve creates it with the right settings.
func checkTopics(cmd *cobra.Command, adm *kadm.Client, needs topics.Needs) ([]topics.Setting, error) {
	td, err := adm.ListTopics(cmd.Context(), needs.Topics.All()...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var present []string
	for _, t := range needs.Topics.All() {
		if d, ok := td[t]; ok && d.Err == nil {
			present = append(present, t)
		}
	}
	found, err := topics.Settings(cmd.Context(), adm, present)
	if err != nil {
		return nil, err
	}
	var rows []topics.Setting
	for _, s := range needs.Check(found) {
		if _, ok := found[s.Topic]; !ok {
			s.Found, s.OK = "(no topic: serve creates it)", true
		}
		rows = append(rows, s)
	}
	return rows, nil
}

func countBad(rows []topics.Setting) int {
	n := 0
	for _, s := range rows {
		if !s.OK {
			n++
		}
	}
	return n
}

func printTopicRows(w io.Writer, rows []topics.Setting) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tSETTING\tFOUND\tNEEDS\tOK")
	for _, s := range rows {
		ok := "ok"
		switch {
		case s.OK:
		case s.Raise != "":
			ok = "apply raises it"
		default:
			ok = "change by hand"
		}
		found := s.Found
		if found == "" {
			found = "(broker default)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Topic, s.Name, found, s.Need, ok)
	}
	_ = tw.Flush()
}

// applyTopics raises every setting that Check found wrong and that can be
// raised, with one incremental AlterConfigs per topic (nothing else of the
// topic changes), and returns what it changed and what it left.
func applyTopics(cmd *cobra.Command, adm *kadm.Client, rows []topics.Setting) (changed, manual []topics.Setting, err error) {
	byTopic := map[string][]topics.Setting{}
	var order []string
	for _, s := range rows {
		switch {
		case s.OK:
		case s.Raise == "":
			manual = append(manual, s)
		default:
			if byTopic[s.Topic] == nil {
				order = append(order, s.Topic)
			}
			byTopic[s.Topic] = append(byTopic[s.Topic], s)
		}
	}
	for _, topic := range order {
		var alters []kadm.AlterConfig
		for _, s := range byTopic[topic] {
			v := s.Raise
			alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: s.Name, Value: &v})
		}
		resp, err := adm.AlterTopicConfigs(cmd.Context(), alters, topic)
		if err != nil {
			return changed, manual, fmt.Errorf("alter topic %s: %w", topic, err)
		}
		for _, r := range resp {
			if r.Err != nil {
				return changed, manual, fmt.Errorf("alter topic %s: %w (%s)", r.Name, r.Err, r.ErrMessage)
			}
		}
		changed = append(changed, byTopic[topic]...)
	}
	return changed, manual, nil
}
