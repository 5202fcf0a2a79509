package cli

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// exitAuditFailed is audit's exit code when a check does not hold: distinct
// from 1 (the audit itself could not run) so a cron job can tell "the
// guarantees were broken" from "Kafka was unreachable".
const exitAuditFailed = 5

func newAuditCmd() *cobra.Command {
	var (
		partitions    string
		group         string
		maxViolations int
		fetchBytes    int
		maxDataBytes  int
		keyMemory     time.Duration
		keyFile       string
		trustedF      string
		origin        string
		format        = newEnum("text", "text", "json")
		kf            *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   "audit [--partitions LIST] [--format text|json] [--max-violations N]",
		Short: "Check the guarantees (docs/guarantees.md) from the records in the topics",
		Long: `Read the commands, journal, outcomes and deadletter topics (read_committed,
from their start to the end offsets taken when the audit starts) and check,
from the records alone:

  hash_chain (G5)         each journal partition's records chain: prev_hash is
                          the previous record's hash and hash matches contents
  commands_answered (G4)  every command below the group's committed offset has
                          an outcome (by causationid); undecodable ones are on
                          the deadletter topic, misrouted ones were forwarded
  outcome_ids (G4)        an outcome id stands for one (causation, status, key)
                          and is their deterministic id; repeats are counted
                          as republications
  outcomes_match (G4)     every outcome states what the journal states: its
                          record is, by its hash, unchanged, the record of its
                          key current when it was published (a repeat gets
                          the key's latest record); its type, subject and key
                          restate it; only rejections the executor answers
                          without a record (key reused or expired, too large
                          or undecodable commands, deadlettered) lack one
  once_per_key (G2)       no in_progress after a key's succeeded, failed or
                          rejected record; attempt numbers never go down
  single_flight (G1)      no two keys of an entity in_progress at once;
                          fencing tokens strictly increase per entity
  journal_signed          with --trusted-keys: every journal record is covered
                          by a transaction seal a trusted executor key signed
                          (docs/trust.md); a record appended by a writer
                          without a key is named by its offsets, and the
                          other checks judge only records a seal covers

Commands at or above the group's committed offset may still be in flight:
they are counted as pending, not as violations. --partitions (e.g. 0,3,5-7)
restricts the command and journal checks to those partitions; outcomes and
deadletters are read whole and matched to them.

Exit codes: 0 every check holds; 5 a check failed (the report says which and
where); 2 usage error; 1 the audit could not run (e.g. Kafka unreachable).`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := parsePartitions(partitions)
			if err != nil {
				return err
			}
			if maxViolations < 0 {
				return usageErrorf("--max-violations must be >= 0")
			}
			if maxDataBytes <= 0 {
				return usageErrorf("--max-data-bytes must be positive")
			}
			if keyMemory <= 0 {
				return usageErrorf("--key-memory must be positive")
			}
			if err := audit.CheckFetchBytes(fetchBytes); err != nil {
				return usageErrorf("--fetch-bytes: %w", err)
			}
			var keys *schemas.ControlKeys
			if keyFile != "" {
				if keys, err = schemas.LoadControlKeys(keyFile); err != nil {
					return usageErrorf("--control-key-file: %w", err)
				}
			}
			var tk *trust.TrustedKeys
			if trustedF != "" {
				if tk, err = loadTrusted(trustedF); err != nil {
					return err
				}
			}
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			rep, err := audit.Run(cmd.Context(), audit.Options{Client: cl, ControlKeys: keys, Trusted: tk, OriginPrefix: origin,
				Topics: schemas.Topics(kf.Topics), Group: group, Partitions: ps,
				MaxDataBytes: maxDataBytes, KeyMemory: keyMemory, MaxViolations: maxViolations, FetchBytes: fetchBytes,
			})
			if errors.Is(err, audit.ErrBadPartition) {
				return usageErrorf("--partitions: %w", err)
			}

			if err != nil {
				return err
			}
			if format.v == "json" {
				err = rep.WriteJSON(cmd.OutOrStdout())
			} else {
				err = rep.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				return exitErr{exitAuditFailed, fmt.Errorf("audit: %d of %d checks failed", rep.Failed(), len(rep.Checks))}
			}
			return nil
		},
	}
	kf = addKafkaFlags(cmd)
	// Checkpoints and proofs (docs/trust.md): what an auditor checks with
	// a public key and nothing else.
	cmd.AddCommand(newAuditVerifyCmd(), newAuditProveCmd(), newAuditCheckProofCmd(), newAuditCheckpointsCmd())
	fs := cmd.Flags()
	fs.StringVar(&partitions, "partitions", "", "command/journal partitions to check, e.g. 0,3,5-7 (default all)")
	fs.Var(format, "format", "report format: text or json")
	fs.StringVar(&keyFile, "control-key-file", "", "the executors' control key file: accepted operator decisions must carry a valid signature of one of its keys (check decisions_signed)")
	fs.StringVar(&trustedF, "trusted-keys", "", "the executors' trusted-keys file: every journal record must be covered by a transaction seal of one of its keys (check journal_signed, docs/trust.md)")
	fs.StringVar(&origin, "origin-prefix", "", "seal origin prefix with --trusted-keys (default onceflight/<journal topic>)")
	fs.IntVar(&maxViolations, "max-violations", 20, "violations listed per check (all are counted)")
	fs.IntVar(&fetchBytes, "fetch-bytes", audit.DefaultFetchBytes, "most one fetch takes of a partition; the audit holds about 18 times this in fetched records, whatever the number of keys: smaller uses less memory and takes longer (docs/memory.md#audit)")
	fs.StringVar(&group, "group", consumer.Defaults().Group, "consumer group of the executors (its committed offsets mark what must be answered)")
	fs.IntVar(&maxDataBytes, "max-data-bytes", schemas.DefaultMaxDataBytes, "the executors' --max-data-bytes: larger commands are expected on the deadletter topic")
	fs.DurationVar(&keyMemory, "key-memory", 90*24*time.Hour, "the executors' key_memory: a key executed again after this long was forgotten by design and is only noted")
	return cmd
}

// parsePartitions parses a list like "0,3,5-7" into sorted, distinct
// partition numbers; "" means all (nil).
func parsePartitions(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int32
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		lo, hi, isRange := strings.Cut(f, "-")
		a, err1 := strconv.ParseInt(lo, 10, 32)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.ParseInt(hi, 10, 32)
		}
		// The width bound keeps a typo like 0-2000000000 from allocating
		// billions of entries; no topic has that many partitions.
		if err1 != nil || err2 != nil || a < 0 || b < a || b-a >= 1<<16 {
			return nil, usageErrorf("--partitions: %q is not a partition or a range like 2-5", f)
		}
		for p := a; p <= b; p++ {
			out = append(out, int32(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
