package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	pubclient "github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

// resolveData is the data of a decision command.
type resolveData = schemas.Decision

// noKeyFileHint is the one line an operator needs when no key is set up.
const noKeyFileHint = "no control key: operator decisions must be signed. Create a key with `onceflight keygen --out FILE`, give it to serve and to this command with --control-key-file FILE (or ONCEFLIGHT_CONTROL_KEY_FILE)"

// decisionSpec says how one decision command (resolve, approve, release)
// differs from the others.
type decisionSpec struct {
	name, use, short, long string
	typ                    string
	// from lists the statuses the target may have; checked here for a
	// clear message, and again by the executor, which decides.
	from []schemas.Status
	// entityRequired: release names its entity, since a final key may be
	// reused by many entities and freeing the wrong one is not undone.
	entityRequired bool
	as             *enumValue // resolve's --as
}

func newResolveCmd() *cobra.Command {
	return newDecisionCmd(decisionSpec{
		name: "resolve", typ: schemas.TypeResolve,
		use:   "resolve KEY --as succeeded|failed|rejected --reason TEXT [--entity E]",
		short: "Record an operator's decision on an unresolved or held execution",
		long: `Record an operator's decision on the unresolved or held execution record of
KEY (docs/events.md#settlement, docs/cli.md#resolve): for an unresolved one, what the operator found out about
the effect; for a held one, the verdict on the suspected duplicate (--as rejected ends it).`,
		from: []schemas.Status{schemas.StatusUnresolved, schemas.StatusHeld},
		as:   newEnum("", string(schemas.StatusSucceeded), string(schemas.StatusFailed), string(schemas.StatusRejected)),
	})
}

func newApproveCmd() *cobra.Command {
	return newDecisionCmd(decisionSpec{
		name: "approve", typ: schemas.TypeApprove,
		use:   "approve KEY --reason TEXT [--entity E]",
		short: "Let a held command (a suspected duplicate) execute, once",
		long: `Approve the held execution record of KEY (docs/cli.md#approve): the executor
runs the held command through its connector once, records the approval in
the record's resolution, and publishes the command's second outcome.`,
		from: []schemas.Status{schemas.StatusHeld},
	})
}

func newReleaseCmd() *cobra.Command {
	return newDecisionCmd(decisionSpec{
		name: "release", typ: schemas.TypeRelease,
		use:   "release KEY --entity E --reason TEXT",
		short: "Free a final idempotency key so that its next command is new work",
		long: `Release the final (succeeded, failed or rejected) record of KEY for entity E
(docs/cli.md#release): the record stays in the journal, marked released,
and the next command with KEY for E executes as new work.`,
		from:           []schemas.Status{schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected},
		entityRequired: true,
	})
}

func newDecisionCmd(spec decisionSpec) *cobra.Command {
	var (
		reason, by, entity, keyFile string
		timeout, validFor           time.Duration
		kf                          *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   spec.use,
		Short: spec.short,
		Long: spec.long + `

The decision is published as a command (type ` + spec.typ + `) to the
entity's partition, signed with the last key of --control-key-file, so the
executor applies it in order with the entity's other commands and records
it in the journal. It acts only on the record of its own entity. The
decision carries a signed not_after, --valid-for from now: an executor
refuses it (rejected expired) once that has passed, so a copy of it
cannot be replayed later. This command waits for that outcome and prints
it; it exits 0 only if the decision was applied.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			key := a[0]
			if strings.TrimSpace(reason) == "" {
				return usageErrorf("--reason must not be empty: it is the audit trail of the decision")
			}
			if by == "" {
				return usageErrorf("--by is empty and the OS user name is unknown: say who decides")
			}
			if spec.entityRequired && entity == "" {
				return usageErrorf("--entity is required: %s acts on one entity's record of %q", spec.name, key)
			}
			if validFor <= 0 || validFor > schemas.MaxDecisionValidity {
				return usageErrorf("--valid-for %s: want more than 0 and at most %s (under dedupe_retention, while the decision's own record answers a copy of it)", validFor, schemas.MaxDecisionValidity)
			}
			if keyFile == "" {
				return errors.New(noKeyFileHint)
			}
			keys, err := schemas.LoadControlKeys(keyFile)
			if err != nil {
				return err
			}
			oc, closeFn, err := kf.onceflightClient(cmd.Context())
			if err != nil {
				return err
			}
			rec, err := decisionTarget(cmd.Context(), oc, key, entity, spec)
			closeFn()
			if err != nil {
				return err
			}
			id := uuid.NewString()
			d := resolveData{Key: key, Reason: reason, By: by, NotAfter: time.Now().Add(validFor).UTC().Truncate(time.Second)}
			if spec.as != nil {
				d.As = spec.as.v
			}
			data, err := json.Marshal(d)
			if err != nil {
				return err
			}
			c := schemas.Command{
				ID:     id,
				Source: defaultSource,
				Type:   spec.typ,
				// Keyed by the record's entity: the decision must reach
				// the partition that owns the record, and acts only on it.
				Subject:        rec.Entity,
				IdempotencyKey: spec.name + "/" + key + "/" + id,
				Data:           data,
			}
			return publish(cmd.Context(), cmd.OutOrStdout(), kf, c, schemas.Binary, true, timeout, pubclient.WithControlKeys(keys))
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	if spec.as != nil {
		fs.Var(spec.as, "as", "the decision: succeeded, failed or rejected")
		_ = cmd.MarkFlagRequired("as")
	}
	fs.StringVar(&entity, "entity", "", "the entity whose record of KEY is meant (needed when several entities used KEY)")
	fs.StringVar(&reason, "reason", "", "why; recorded with the decision")
	fs.StringVar(&by, "by", defaultBy(), "who decides, recorded with the decision; defaults to the OS user name")
	fs.StringVar(&keyFile, "control-key-file", "", "control key file (onceflight keygen) whose last key signs the decision")
	fs.DurationVar(&timeout, "timeout", defaultWait, "how long to wait for the executor to apply the decision")
	fs.DurationVar(&validFor, "valid-for", schemas.DecisionValidity, "how long the signed decision may be applied: executors refuse it (rejected expired) after that (its not_after); at most 168h")
	_ = cmd.MarkFlagRequired("reason")
	if spec.entityRequired {
		_ = cmd.MarkFlagRequired("entity")
	}
	return cmd
}

// decisionTarget finds the record a decision is about: the record of key
// for entity, or with no entity the only record of key in a status the
// decision applies to.
func decisionTarget(ctx context.Context, oc *pubclient.Client, key, entity string, spec decisionSpec) (schemas.Record, error) {
	recs, err := oc.KeyRecords(ctx, key)
	if err != nil {
		return schemas.Record{}, err
	}
	if entity != "" {
		recs = slices.DeleteFunc(recs, func(r schemas.Record) bool { return r.Entity != entity })
	}
	if len(recs) == 0 {
		if entity != "" {
			return schemas.Record{}, fmt.Errorf("no record for key %q of entity %q", key, entity)
		}
		return schemas.Record{}, fmt.Errorf("no record for key %q", key)
	}
	names := make([]string, len(spec.from))
	for i, s := range spec.from {
		names[i] = string(s)
	}
	fit := slices.DeleteFunc(slices.Clone(recs), func(r schemas.Record) bool { return !slices.Contains(spec.from, r.Status) || r.Release != nil })
	switch {
	case len(fit) == 1:
		return fit[0], nil
	case len(fit) > 1:
		ents := make([]string, len(fit))
		for i, r := range fit {
			ents[i] = r.Entity
		}
		return schemas.Record{}, fmt.Errorf("key %q has records of several entities (%s): say which with --entity", key, strings.Join(ents, ", "))
	}
	r := recs[len(recs)-1]
	st := string(r.Status)
	if r.Release != nil {
		st = "released"
	}
	return schemas.Record{}, fmt.Errorf("record %q of entity %q is %s; only %s records can be %s", key, r.Entity, st, strings.Join(names, " or "), pastTense(spec.name))
}

func pastTense(verb string) string {
	if strings.HasSuffix(verb, "e") {
		return verb + "d"
	}
	return verb + "ed"
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

func newKeygenCmd() *cobra.Command {
	var out, id, trusted, publicOut string
	kind := newEnum("operator", "operator", "hmac", "executor")
	cmd := &cobra.Command{
		Use:   "keygen --out FILE [--id ID] [--kind operator|hmac|executor]",
		Short: "Write a key for signing operator decisions or checkpoints",
		Long: `Create a key and write it to FILE with mode 0600 (docs/cli.md#keygen).

--kind operator (the default): an Ed25519 key for operator decisions
(resolve, approve, release), id ID. FILE holds its private half, for the
operators' CLI and the console; the public copy, written to --public-out
(default FILE with .pub.json), is what executors and auditors verify with
(--control-key-file): they can check decisions but not make them.

--kind hmac: a shared HMAC secret (32 random bytes), the scheme of earlier
releases: every verifier holds the secret and could sign.

For both, if FILE exists the key is added to it: keys are rotated by adding
a new one (signers use the last key, executors accept every key in the
file), moving every signer to the new file, then removing the old key.

--kind executor writes an Ed25519 signing key for an executor's checkpoints
instead (docs/trust.md): FILE (never overwritten) holds the private key,
named --id; the public key is printed as a trusted-keys line, and added to
--trusted-keys FILE when given.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kind.v == "executor" {
				return keygenExecutor(cmd.OutOrStdout(), out, id, trusted)
			}
			if trusted != "" {
				return usageErrorf("--trusted-keys goes with --kind executor")
			}
			if publicOut != "" && kind.v != "operator" {
				return usageErrorf("--public-out goes with --kind operator")
			}
			if id == "" {
				id = "key-" + time.Now().UTC().Format("20060102-150405")
			}
			ks := &schemas.ControlKeys{}
			if _, err := os.Stat(out); err == nil {
				if ks, err = schemas.LoadControlKeys(out); err != nil {
					return err
				}
			}
			for _, k := range ks.Keys {
				if k.ID == id {
					return usageErrorf("%s already holds a key with id %q: choose another --id", out, id)
				}
			}
			newKey := schemas.NewOperatorKey
			if kind.v == "hmac" {
				newKey = schemas.NewControlKey
			}
			k, err := newKey(id)
			if err != nil {
				return err
			}
			ks.Keys = append(ks.Keys, k)
			if err := writeKeyFile(out, ks.Encode(), 0o600); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s key %q to %s (%d keys)\n", cmp.Or(k.Type, schemas.KeyHMAC), id, out, len(ks.Keys))
			if kind.v != "operator" {
				return nil
			}
			if publicOut == "" {
				publicOut = strings.TrimSuffix(out, ".json") + ".pub.json"
			}
			pub, hmacKeys := ks.Public()
			if err := writeKeyFile(publicOut, pub.Encode(), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(w, "wrote its public copy to %s: give that to serve, audit and auditors with --control-key-file\n", publicOut)
			if hmacKeys > 0 {
				fmt.Fprintf(w, "%s also holds %d HMAC key(s), left out of the public copy: executors need %s itself until decisions signed with them no longer matter\n", out, hmacKeys, out)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the key file to create or add to")
	cmd.Flags().StringVar(&id, "id", "", "the new key's id (default key-<UTC time>; executor keys: executor-<hostname>)")
	cmd.Flags().Var(kind, "kind", "operator: an Ed25519 decision key (private file + public copy); hmac: a shared HMAC secret; executor: an Ed25519 checkpoint signing key")
	cmd.Flags().StringVar(&publicOut, "public-out", "", "with --kind operator: where the public copy goes (default FILE with .pub.json)")
	cmd.Flags().StringVar(&trusted, "trusted-keys", "", "with --kind executor: a trusted-keys file to add the public key to (created if missing)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// writeKeyFile replaces path with b atomically, with mode perm.
func writeKeyFile(path string, b []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, perm); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if err := os.Chmod(tmp, perm); err != nil { // WriteFile keeps the mode of an old tmp
		return fmt.Errorf("keygen: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	return nil
}
