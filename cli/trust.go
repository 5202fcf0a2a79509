package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/checkpointcheck"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/trust"
)

// keygenExecutor writes an executor's Ed25519 key (docs/trust.md).
func keygenExecutor(stdout io.Writer, out, name, trustedFile string) error {
	if name == "" {
		h, _ := os.Hostname()
		name = "executor-" + h
	}
	skey, vkey, err := trustlog.GenerateKey(name)
	if err != nil {
		return usageErrorf("--id: %v (a name is printable, without spaces or '+')", err)
	}
	if err := trustlog.WriteSigner(out, skey); err != nil {
		return usageError{err}
	}
	line := vkey + " not_before=" + time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	if trustedFile != "" {
		f, err := os.OpenFile(trustedFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("keygen: --trusted-keys: %w", err)
		}
		_, err = fmt.Fprintln(f, line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("keygen: --trusted-keys %s: %w", trustedFile, err)
		}
	}
	fmt.Fprintf(stdout, "wrote executor key %q to %s (mode 0600); its trusted-keys line:\n%s\n", name, out, line)
	return nil
}

// loadTrusted loads --trusted-keys, a usage error when it is bad.
func loadTrusted(path string) (*trust.TrustedKeys, error) {
	if path == "" {
		return nil, usageErrorf("--trusted-keys is required: the public keys whose checkpoints are believed")
	}
	tk, err := trust.LoadTrustedKeys(path)
	if err != nil {
		return nil, usageError{err}
	}
	return tk, nil
}

// checkpointSources reads --checkpoints values: "topic" (the default
// checkpoints topic), "topic:NAME", or a file of signed notes.
func checkpointSources(vals []string) (notes [][]byte, topic string, err error) {
	for _, v := range vals {
		switch {
		case v == "topic":
			topic = consumer.DefaultCheckpointsTopic
		case strings.HasPrefix(v, "topic:"):
			topic = strings.TrimPrefix(v, "topic:")
		default:
			b, err := os.ReadFile(v)
			if err != nil {
				return nil, "", usageErrorf("--checkpoints: %v", err)
			}
			ns, err := trust.SplitNotes(b)
			if err != nil {
				return nil, "", usageErrorf("--checkpoints %s: %v", v, err)
			}
			if len(ns) == 0 {
				return nil, "", usageErrorf("--checkpoints %s holds no checkpoint", v)
			}
			notes = append(notes, ns...)
		}
	}
	return notes, topic, nil
}

func newAuditVerifyCmd() *cobra.Command {
	var (
		sources    []string
		trustedF   string
		partitions string
		origin     string
		signed     bool
		format     = newEnum("text", "text", "json")
		kf         *kafkaFlags
	)
	cmd := &cobra.Command{
		Use:   "verify --checkpoints FILE|topic[:NAME] --trusted-keys FILE",
		Short: "Check signed checkpoints against the journal (docs/trust.md)",
		Long: `Replay each journal partition from its first record, rebuild its RFC 6962
Merkle tree, and check every checkpoint: signed by a trusted key valid when
it was signed, of a known origin (onceflight/<journal>/<partition>), and the
journal's first SIZE records hash to its root. Checkpoints of one partition
must be consistent with each other. A journal whose records were deleted,
altered, reordered or inserted before a checkpoint, truncated below it or
recreated, fails. With --require-signed, every journal record must also be
covered by a transaction seal signed by a trusted key: a record appended by
anyone without an executor key fails, named by its offsets.

--checkpoints is a file of signed notes (what GET /checkpoints and
"audit checkpoints" write; the auditor's saved copies), "topic" for the
executors' checkpoints topic (onceflight.checkpoints) or "topic:NAME";
repeatable.

Exit codes: 0 every checkpoint verified; 5 a checkpoint is refused (bad
signature, untrusted, revoked or expired key, unknown origin) or does not
match the journal; 2 usage error (also a malformed trusted-keys or
checkpoints file); 1 the check could not run.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			tk, err := loadTrusted(trustedF)
			if err != nil {
				return err
			}
			if len(sources) == 0 && !signed {
				return usageErrorf("--checkpoints is required: a file of saved checkpoints, or topic (or --require-signed alone)")
			}
			notes, topic, err := checkpointSources(sources)
			if err != nil {
				return err
			}
			ps, err := parsePartitions(partitions)
			if err != nil {
				return err
			}
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			rep, err := checkpointcheck.Verify(cmd.Context(), checkpointcheck.Options{Client: cl, Journal: kf.Topics.Journal,
				OriginPrefix: origin, Trusted: tk, Checkpoints: notes, Topic: topic, Partitions: ps, RequireSigned: signed})
			if errors.Is(err, checkpointcheck.ErrBadPartition) {
				return usageErrorf("--partitions: %w", err)
			}
			if err != nil {
				return err
			}
			if format.v == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			} else {
				err = rep.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				return exitErr{exitAuditFailed, errors.New("audit verify: the journal does not match its checkpoints, or holds records no trusted signature covers (the report names them)")}
			}
			return nil
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.StringArrayVar(&sources, "checkpoints", nil, "saved checkpoints: a file of signed notes (audit checkpoints, GET /checkpoints), topic or topic:NAME (repeatable)")
	fs.StringVar(&trustedF, "trusted-keys", "", "trusted-keys file: the executors' public keys (docs/trust.md)")
	fs.StringVar(&partitions, "partitions", "", "journal partitions to check, e.g. 0,3,5-7 (default all)")
	fs.StringVar(&origin, "origin-prefix", "", "checkpoint origin prefix (default onceflight/<journal topic>)")
	fs.BoolVar(&signed, "require-signed", false, "also require every journal record to be covered by a transaction seal of a trusted key (serve --require-signed-journal)")
	fs.Var(format, "format", "report format: text or json")
	return cmd
}

func newAuditProveCmd() *cobra.Command {
	var (
		entity   string
		sources  []string
		trustedF string
		origin   string
		outDir   string
		kf       *kafkaFlags
	)
	cmd := &cobra.Command{
		Use:   "prove KEY --entity E --trusted-keys FILE [--out DIR]",
		Short: "Write the journal records of a key with inclusion proofs (C2SP tlog-proof)",
		Long: `Find the journal records of idempotency key KEY of entity E and prove each
is in its partition's tree, against the largest trusted checkpoint that
matches the journal and covers it. Each proof is a C2SP tlog-proof bundle
(c2sp.org/tlog-proof@v1) whose extra data is the record, written to
DIR/<partition>-<leaf index>.tlog-proof. "audit check-proof" verifies one
with nothing but the bundle and the public key (docs/trust.md says how to
check it with any RFC 6962 library).

Exit codes: 0 proofs written; 5 no trusted checkpoint covers the records
yet; 2 usage error; 1 the proof could not be made.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if entity == "" {
				return usageErrorf("--entity is required: the key is scoped to its entity")
			}
			tk, err := loadTrusted(trustedF)
			if err != nil {
				return err
			}
			if len(sources) == 0 {
				sources = []string{"topic"}
			}
			notes, topic, err := checkpointSources(sources)
			if err != nil {
				return err
			}
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			proved, err := checkpointcheck.Prove(cmd.Context(), checkpointcheck.Options{Client: cl, Journal: kf.Topics.Journal,
				OriginPrefix: origin, Trusted: tk, Checkpoints: notes, Topic: topic}, entity, a[0])
			if errors.Is(err, checkpointcheck.ErrNoCheckpoint) {
				return exitErr{exitAuditFailed, err}
			}
			if err != nil {
				return err
			}
			if err := os.MkdirAll(outDir, 0o755); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			for _, p := range proved {
				path := filepath.Join(outDir, fmt.Sprintf("%d-%d.tlog-proof", p.Partition, p.Index))
				if err := os.WriteFile(path, p.Bundle, 0o644); err != nil {
					return fmt.Errorf("write proof: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s  %s %s attempt %d (journal partition %d offset %d, leaf %d)\n",
					path, p.Record.Status, p.Record.IdempotencyKey, p.Record.Attempts, p.Partition, p.Offset, p.Index)
			}
			return nil
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&entity, "entity", "", "the entity the key belongs to")
	fs.StringArrayVar(&sources, "checkpoints", nil, "checkpoints to prove against: a file, topic or topic:NAME (default topic)")
	fs.StringVar(&trustedF, "trusted-keys", "", "trusted-keys file: the executors' public keys")
	fs.StringVar(&origin, "origin-prefix", "", "checkpoint origin prefix (default onceflight/<journal topic>)")
	fs.StringVar(&outDir, "out", ".", "directory to write the proofs to")
	return cmd
}

func newAuditCheckProofCmd() *cobra.Command {
	var trustedF string
	cmd := &cobra.Command{
		Use:   "check-proof FILE... --trusted-keys FILE",
		Short: "Verify tlog-proof bundles offline, with a public key only",
		Long: `Verify each C2SP tlog-proof bundle written by "audit prove", without Kafka:
its checkpoint is signed by a trusted key valid when it signed, and the
record it carries is the leaf at its index of the checkpoint's tree
(RFC 6962 inclusion proof). Prints the record.

Exit codes: 0 every proof verified; 5 a proof is refused (bad or
truncated bundle, altered record, untrusted signature); 2 usage error
(also a malformed trusted-keys file); 1 a file could not be read.`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, files []string) error {
			tk, err := loadTrusted(trustedF)
			if err != nil {
				return err
			}
			failed := 0
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				cp, leaf, err := trust.CheckProof(b, tk)
				if err != nil {
					failed++
					fmt.Fprintf(cmd.OutOrStdout(), "REFUSED  %s: %v\n", f, err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "ok       %s: leaf of %s size %d, signed by %s at %s\n%s\n",
					f, cp.Origin, cp.Size, cp.Signer, cp.Time.Format(time.RFC3339), leaf.Value)
			}
			if failed > 0 {
				return exitErr{exitAuditFailed, fmt.Errorf("check-proof: %d of %d proofs refused", failed, len(files))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&trustedF, "trusted-keys", "", "trusted-keys file: the executors' public keys")
	return cmd
}

func newAuditCheckpointsCmd() *cobra.Command {
	var (
		trustedF string
		origin   string
		out      string
		kf       *kafkaFlags
	)
	cmd := &cobra.Command{
		Use:   "checkpoints --trusted-keys FILE [--out FILE]",
		Short: "Save the checkpoints of the checkpoints topic that verify",
		Long: `Read the executors' checkpoints topic, keep the checkpoints signed by a
trusted key and append them to --out (default stdout), one signed note
after another: the file "audit verify --checkpoints FILE" checks later,
after the topic was compacted or rewritten.

Exit codes: 0 saved; 5 a checkpoint on the topic is refused (it is not
saved); 2 usage error; 1 the topic could not be read.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			tk, err := loadTrusted(trustedF)
			if err != nil {
				return err
			}
			cl, err := kf.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			good, refused, err := checkpointcheck.SavedCheckpoints(cmd.Context(), checkpointcheck.Options{Client: cl, Journal: kf.Topics.Journal,
				OriginPrefix: origin, Trusted: tk, Topic: consumer.DefaultCheckpointsTopic})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out != "" {
				f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
				if err != nil {
					return fmt.Errorf("--out: %w", err)
				}
				defer f.Close()
				w = f
			}
			for _, n := range good {
				if _, err := fmt.Fprintf(w, "%s\n", n); err != nil {
					return err
				}
			}
			for _, r := range refused {
				fmt.Fprintf(cmd.ErrOrStderr(), "REFUSED  %s\n", r)
			}
			if len(refused) > 0 {
				return exitErr{exitAuditFailed, fmt.Errorf("audit checkpoints: %d refused", len(refused))}
			}
			return nil
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&trustedF, "trusted-keys", "", "trusted-keys file: the executors' public keys")
	fs.StringVar(&origin, "origin-prefix", "", "checkpoint origin prefix (default onceflight/<journal topic>)")
	fs.StringVar(&out, "out", "", "file to append the checkpoints to (default stdout)")
	return cmd
}

// checkpointsHandler serves GET /checkpoints: the last checkpoint this
// executor published for each journal partition, signed notes one after
// another (text/plain). Like /metrics it asks no credential: a checkpoint
// holds no record, only a count and a hash, and is signed to be handed
// around.
func checkpointsHandler(src interface{ Checkpoints() map[int32][]byte }) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		cps := src.Checkpoints()
		ps := make([]int32, 0, len(cps))
		for p := range cps {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, p := range ps {
			fmt.Fprintf(w, "%s\n", cps[p])
		}
	})
}

// checkpointOptions are serve's checkpoint flags.
type checkpointOptions struct {
	keyFile     string
	trustedFile string
	topic       string
	every       uint64
	interval    time.Duration
	require     bool
	// trusted is what option loaded from trustedFile (nil without it): the
	// console of the same serve believes the keys the executor does, read
	// once.
	trusted *trust.TrustedKeys
}

func (c *checkpointOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.keyFile, "checkpoint-key-file", "", "executor signing key (onceflight keygen --kind executor): publish signed checkpoints of the journal (docs/trust.md); off when empty")
	fs.StringVar(&c.trustedFile, "trusted-keys", "", "trusted-keys file: the executors' public keys, to go on from another executor's checkpoint after a takeover")
	fs.StringVar(&c.topic, "checkpoints-topic", consumer.DefaultCheckpointsTopic, "topic of the signed checkpoints")
	fs.Uint64Var(&c.every, "checkpoint-every", 10_000, "journal records per partition between checkpoints")
	fs.DurationVar(&c.interval, "checkpoint-interval", 10*time.Second, "longest time new journal records wait for a checkpoint")
	fs.BoolVar(&c.require, "require-signed-journal", false, "restore and takeover accept only journal records a trusted executor signature covers; others hold their partition (needs --checkpoint-key-file and --trusted-keys)")
}

// option is the executor option the flags ask for (none without a key).
func (c *checkpointOptions) option(journal string) ([]consumer.Option, error) {
	if c.keyFile == "" {
		if c.require {
			return nil, usageErrorf("--require-signed-journal needs --checkpoint-key-file: an executor that requires signed journal records signs its own (onceflight keygen --kind executor)")
		}
		if c.trustedFile != "" {
			return nil, usageErrorf("--trusted-keys needs --checkpoint-key-file: it is read to go on from other executors' checkpoints")
		}
		return nil, nil
	}
	if c.require && c.trustedFile == "" {
		return nil, usageErrorf("--require-signed-journal needs --trusted-keys: the executors' public keys whose signatures are accepted")
	}
	if c.every == 0 || c.interval <= 0 {
		return nil, usageErrorf("--checkpoint-every and --checkpoint-interval must be positive")
	}
	s, err := trustlog.LoadSigner(c.keyFile)
	if err != nil {
		return nil, usageErrorf("--checkpoint-key-file: %w", err)
	}
	var tk *trust.TrustedKeys
	if c.trustedFile != "" {
		if tk, err = trust.LoadTrustedKeys(c.trustedFile); err != nil {
			return nil, usageErrorf("--trusted-keys: %w", err)
		}
	}
	c.trusted = tk
	return []consumer.Option{consumer.WithCheckpoints(consumer.CheckpointConfig{
		Signer: s, Trusted: tk, Topic: c.topic, Every: c.every, Interval: c.interval,
		OriginPrefix: "onceflight/" + journal,
	}), consumer.WithSignedJournal(consumer.SignedJournal{
		Signer: s, Trusted: tk, Require: c.require, OriginPrefix: "onceflight/" + journal,
	})}, nil
}

// withCheckpoints routes /checkpoints to ex, the rest to next.
func withCheckpoints(ex interface{ Checkpoints() map[int32][]byte }, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/checkpoints", checkpointsHandler(ex))
	mux.Handle("/", next)
	return mux
}
