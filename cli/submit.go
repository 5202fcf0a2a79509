package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

// defaultSource is the CloudEvents source of commands the CLI publishes.
const defaultSource = "onceflight-cli"

// defaultWait bounds --wait and resolve: long enough for a connector's
// confirm cycle, short enough that a script notices a stopped executor.
const defaultWait = 30 * time.Second

func newSubmitCmd() *cobra.Command {
	var (
		action, entity, key, data, source, id string
		expected                              int64
		wait                                  bool
		timeout                               time.Duration
		mode                                  = newEnum("binary", "binary", "structured")
		kf                                    *kafkaFlags // set below, before RunE can run
	)
	cmd := &cobra.Command{
		Use:   "submit --action A --entity E [--key K] [--data JSON|@file]",
		Short: "Publish a command event",
		Long: `Publish a command event (docs/events.md#command-events) to the commands
topic, keyed by the entity.

Without --wait it prints {"id":...,"key":...,"partition":...,"offset":...},
where key is the idempotency key (derived as source/id when --key is not
given), and exits 1 if the brokers did not acknowledge within --timeout.
With --wait it prints the command's outcome event as one JSON line and exits
0 only if its status is succeeded (3 otherwise, 4 if none arrived within
--timeout).
--data takes a JSON object, @file to read one from a file, or @- for stdin.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			payload, err := readData(data, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if action == "" || entity == "" {
				return usageErrorf("--action and --entity must not be empty")
			}
			c := schemas.Command{
				ID:             id,
				Source:         source,
				Type:           action,
				Subject:        entity,
				IdempotencyKey: key,
				Data:           payload,
			}
			if c.ID == "" {
				c.ID = uuid.NewString()
			}
			if cmd.Flags().Changed("expected-version") {
				if expected < 0 {
					return usageErrorf("--expected-version must be >= 0")
				}
				c.ExpectedVersion = &expected
			}
			m := schemas.Binary
			if mode.v == "structured" {
				m = schemas.Structured
			}
			return publish(cmd.Context(), cmd.OutOrStdout(), kf, c, m, wait, timeout)
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&action, "action", "", "the action (CloudEvents type), e.g. payments.refund")
	fs.StringVar(&entity, "entity", "", "the entity ID (CloudEvents subject and Kafka key)")
	fs.StringVar(&key, "key", "", "idempotency key (default: source/id)")
	fs.StringVar(&data, "data", "", "command data: a JSON object, @file or @- (stdin)")
	fs.Int64Var(&expected, "expected-version", 0, "execute only if the entity's version equals this")
	fs.StringVar(&source, "source", defaultSource, "CloudEvents source")
	fs.StringVar(&id, "id", "", "CloudEvents id (default: a random UUID)")
	fs.Var(mode, "mode", "CloudEvents Kafka binding mode: binary or structured")
	fs.BoolVar(&wait, "wait", false, "wait for the outcome and print it")
	fs.DurationVar(&timeout, "timeout", defaultWait, "how long to wait for the brokers' acknowledgement and, with --wait, for the outcome")
	_ = cmd.MarkFlagRequired("action")
	_ = cmd.MarkFlagRequired("entity")
	return cmd
}

// readData returns --data as a compact JSON object, or nil when not given.
// Data must be an object (docs/events.md#command-attributes); checking here gives the user a clear
// message instead of a rejected outcome from the executor later.
func readData(arg string, stdin io.Reader) (json.RawMessage, error) {
	if arg == "" {
		return nil, nil
	}
	raw := []byte(arg)
	from := "--data"
	if name, ok := strings.CutPrefix(arg, "@"); ok {
		var err error
		if name == "-" {
			raw, err = io.ReadAll(stdin)
			from = "--data from stdin"
		} else {
			raw, err = os.ReadFile(name)
			from = "--data file " + name
		}
		if err != nil { // a file that is not there is a bad flag, like a bad --kafka-config
			return nil, usageError{fmt.Errorf("read %s: %w", from, err)}
		}
	}
	raw = bytes.TrimSpace(raw)
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		return nil, usageErrorf("%s is not valid JSON (%v); it must be a JSON object, e.g. '{\"amount\":100}'", from, err)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, usageErrorf("%s is %s, but must be a JSON object, e.g. '{\"amount\":100}'", from, jsonKind(raw))
	}
	if err := schemas.CheckIJSON(raw); err != nil {
		return nil, usageErrorf("%s must be a JSON object in I-JSON (RFC 7493), as the executor requires: %v", from, err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, usageErrorf("%s: %v", from, err)
	}
	return buf.Bytes(), nil
}

// jsonKind names the kind of a valid JSON value that is not an object.
func jsonKind(raw []byte) string {
	switch raw[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "JSON null"
	default:
		return "a number"
	}
}

// publish produces c to the commands topic and, with wait, waits for its
// outcome and prints it. The client registers the wait with its outcomes
// reader before producing: the outcome cannot precede its command, so
// nothing is missed, however fast the executor is.
func publish(ctx context.Context, out io.Writer, kf *kafkaFlags, c schemas.Command, mode schemas.Mode, wait bool, timeout time.Duration, extra ...client.Option) error {
	if timeout <= 0 {
		return usageErrorf("--timeout must be positive")
	}
	opts := append([]client.Option(nil), extra...)
	if mode == schemas.Structured {
		opts = append(opts, client.WithStructuredMode())
	}
	oc, closeFn, err := kf.onceflightClient(ctx, opts...)
	if err != nil {
		return err
	}
	defer closeFn()

	cmd := client.Command{
		ID: c.ID, Source: c.Source, Action: c.Type, Entity: c.Subject, Key: c.IdempotencyKey,
		Data: c.Data, ExpectedVersion: c.ExpectedVersion, TraceParent: c.TraceParent,
	}
	if c.Deadline != nil {
		cmd.Deadline = *c.Deadline
	}
	// --timeout bounds the whole command, the produce included: franz-go
	// retries an unreachable broker until the record's context ends, so
	// without a deadline a stopped broker would hang submit forever.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !wait {
		s, err := oc.Send(ctx, cmd)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("produce to %s: no acknowledgement from --brokers %s within --timeout %s (is Kafka running?): %w",
					kf.Topics.Commands, strings.Join(kf.Brokers, ","), timeout, err)
			}
			return err
		}
		// The key is printed even when derived, so a script can ask
		// `onceflight status KEY` without knowing the default rule; it
		// is the client's, which fills an empty --source with its own.
		return json.NewEncoder(out).Encode(struct {
			ID        string `json:"id"`
			Key       string `json:"key"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
		}{s.ID, s.Key, s.Partition, s.Offset})
	}

	p, err := oc.Submit(ctx, cmd)
	if err != nil {
		return err
	}
	o, err := p.Wait(ctx)
	if errors.Is(err, client.ErrNoOutcome) && errors.Is(err, context.DeadlineExceeded) {
		return exitErr{exitNoOutcome, fmt.Errorf(
			"no outcome for command %s within %s; it was published (partition %d, offset %d) and may still be executed: is an executor running? check later with 'onceflight outcomes --from-beginning'",
			p.ID, timeout, p.Partition, p.Offset)}
	}
	if errors.Is(err, client.ErrNoOutcome) { // interrupted (exit 130)
		return fmt.Errorf("stopped waiting for the outcome of command %s (key %s); it was published (partition %d, offset %d) and may still be executed: check later with 'onceflight status %s': %w",
			p.ID, p.Key, p.Partition, p.Offset, p.Key, context.Cause(ctx))
	}
	if err != nil {
		return err
	}
	return printOutcome(out, o)
}

// printOutcome prints the outcome event as published, on one line, and turns
// a status other than succeeded into exit code 3.
func printOutcome(out io.Writer, o client.Outcome) error {
	if err := writeJSONLine(out, o.Event.Value); err != nil {
		return err
	}
	if err := o.Err(); err != nil {
		return exitErr{exitNotSucceded, fmt.Errorf("outcome of %w", err)}
	}
	return nil
}

// writeJSONLine writes a record value as one line: compacted if it is JSON
// (so line-oriented tools can read it), as is otherwise.
func writeJSONLine(out io.Writer, v []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		buf.Reset()
		buf.Write(bytes.ReplaceAll(v, []byte("\n"), []byte(" ")))
	}
	buf.WriteByte('\n')
	_, err := out.Write(buf.Bytes())
	return err
}
