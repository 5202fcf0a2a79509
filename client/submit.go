package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// ErrNoOutcome is returned by Wait, wrapped with the context's error, when
// ctx ends before the outcome appears. It means "not seen yet", not "not
// executed": the executor may still be working, or down. Wait may be
// called again; Status tells what the journal holds.
var ErrNoOutcome = errors.New("no outcome yet")

// Command is a command to execute (docs/events.md#command-events). Action and Entity are
// required; everything else has a default.
type Command struct {
	// Action is the action name, e.g. "payments.refund" (CloudEvents
	// type); the executor rejects actions it is not configured for.
	Action string
	// Entity is the entity the effect is about, e.g. "order-1042"
	// (CloudEvents subject, and the Kafka key: all commands of an entity
	// are executed in order, one at a time).
	Entity string
	// Key is the idempotency key: the same key for the same entity is
	// executed at most once, and a repeat gets the recorded result.
	// Default: Source + "/" + ID, which makes every Submit new work; set
	// it to your operation's identity (a refund request id) to make
	// retries safe.
	Key string
	// Data is the connector's input: a JSON object, at most 512 KiB
	// unless the executor allows more, and I-JSON (no number beyond an
	// IEEE 754 double, no invalid Unicode, no member name twice: Submit
	// and Send refuse such data, which the executor would answer
	// rejected invalid_command). Nil sends no data.
	Data json.RawMessage
	// ExpectedVersion, if set, executes only if the entity's version
	// equals it (optimistic concurrency); otherwise the outcome is
	// rejected with version_conflict.
	ExpectedVersion *int64
	// Deadline, if set, rejects the command as expired if it has not
	// started by then.
	Deadline time.Time
	// TraceParent is a W3C trace context passed to the connector and the
	// outcome.
	TraceParent string
	// ID is the CloudEvents id (default: a random UUID) and the outcome's
	// causation id. Source is the CloudEvents source (default: the
	// client's, see WithSource).
	ID, Source string
}

// Sent is where a command was written.
type Sent struct {
	// ID is the command's CloudEvents id: its outcome's causation id.
	ID string
	// Key is the idempotency key the executor will use.
	Key       string
	Partition int32
	Offset    int64
}

// Pending is a submitted command whose outcome can be awaited with Wait.
type Pending struct {
	Sent
	d *dispatcher
	w *waiter
}

// Outcome is the answer to a command: the decoded outcome event (docs/events.md#execution-records).
type Outcome struct {
	// ID is the outcome event's id, deterministic in (key, status,
	// command id): a republication after a crash repeats it, so a
	// subscriber drops ids it has processed.
	ID string
	// CommandID is the id of the command answered (causationid).
	CommandID string
	Entity    string
	Key       string
	Action    string
	Status    schemas.Status
	// ErrorCode and ErrorMessage say why, for statuses other than
	// succeeded; codes are stable (docs/events.md#execution-records: version_conflict,
	// connector_rejected, ...).
	ErrorCode, ErrorMessage string
	// EstablishedBy says how Status was established: "answer" (the
	// external system's answer), "confirmation" (a confirm call after an
	// ambiguous answer), "reconciler", "operator" or "rule"
	// (docs/events.md#evidence); "" for records written before it existed.
	EstablishedBy string
	// Result is what the connector returned, e.g. an http connector's
	// {"http_status":201,"body":{...}}; nil if none.
	Result json.RawMessage
	// Replayed is true when the key already had a final record and this
	// is the recorded result, not a new execution.
	Replayed bool
	// Record is the whole execution record carried by the event.
	Record schemas.Record
	// Event is the Kafka record as published (topic, partition, offset,
	// headers, value), for callers that forward or print it verbatim.
	Event *kgo.Record
}

func outcomeOf(so schemas.Outcome, rec *kgo.Record) Outcome {
	o := Outcome{
		ID: so.ID, CommandID: so.CausationID, Entity: so.Subject, Key: so.IdempotencyKey,
		Action: so.Record.Action, Status: so.Record.Status, Result: so.Record.Result,
		Replayed: so.Replayed, Record: so.Record, Event: rec, EstablishedBy: so.Record.EstablishedBy,
	}
	if e := so.Record.Error; e != nil {
		o.ErrorCode, o.ErrorMessage = e.Code, e.Message
	}
	if o.Key == "" {
		o.Key = so.Record.IdempotencyKey
	}
	if o.Entity == "" {
		o.Entity = so.Record.Entity
	}
	return o
}

// Err returns nil if the command succeeded and an *OutcomeError otherwise,
// for callers that treat anything but success as a failure.
func (o Outcome) Err() error {
	if o.Status == schemas.StatusSucceeded {
		return nil
	}
	return &OutcomeError{Outcome: o}
}

// OutcomeError is an outcome other than succeeded, as an error.
type OutcomeError struct{ Outcome Outcome }

// Error says the command, its status and why, as a log line would.
func (e *OutcomeError) Error() string {
	s := fmt.Sprintf("command %s (entity %q, key %q): %s", e.Outcome.CommandID, e.Outcome.Entity, e.Outcome.Key, e.Outcome.Status)
	if e.Outcome.ErrorCode != "" {
		s += fmt.Sprintf(" (%s: %s)", e.Outcome.ErrorCode, e.Outcome.ErrorMessage)
	}
	return s
}

// DecodeError is a record on the outcomes topic that is not a decodable
// outcome event (someone else's event on a shared topic, or a newer
// format). Outcomes yields it with the Outcome's Event set; a subscriber
// usually logs it and reads on.
type DecodeError struct {
	Partition int32
	Offset    int64
	Err       error
}

// Error says where the record is and why it is not an outcome event.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("outcomes partition %d offset %d: %v", e.Partition, e.Offset, e.Err)
}

// Unwrap returns the decoding error, for errors.Is and errors.As.
func (e *DecodeError) Unwrap() error { return e.Err }

// Submit publishes cmd and returns a Pending whose Wait returns its
// outcome. The wait is registered before the command is produced, with the
// client's one shared outcomes reader (started by the first Submit), so an
// outcome cannot be missed however fast the executor answers.
//
// Every Pending is held by the client until its outcome arrives, it is
// forgotten (Forget), or the client is closed.
func (c *Client) Submit(ctx context.Context, cmd Command) (*Pending, error) {
	sc, err := c.command(cmd)
	if err != nil {
		return nil, err
	}
	d, err := c.dispatcher(ctx)
	if err != nil {
		return nil, fmt.Errorf("submit %s for %q: %w", sc.Type, sc.Subject, err)
	}
	w, err := d.register(sc.ID)
	if err != nil {
		return nil, fmt.Errorf("submit %s for %q: outcomes reader stopped: %w", sc.Type, sc.Subject, err)
	}
	sent, err := c.produce(ctx, sc)
	if err != nil {
		d.forget(sc.ID, w)
		return nil, err
	}
	return &Pending{Sent: sent, d: d, w: w}, nil
}

// Send publishes cmd without awaiting its outcome: for producers that read
// outcomes elsewhere (Outcomes, or another service). It starts no reader.
func (c *Client) Send(ctx context.Context, cmd Command) (Sent, error) {
	sc, err := c.command(cmd)
	if err != nil {
		return Sent{}, err
	}
	if c.closed() {
		return Sent{}, ErrClosed
	}
	return c.produce(ctx, sc)
}

// Wait returns the command's first outcome, or an error wrapping
// ErrNoOutcome when ctx ends first (Wait may then be called again), or
// ErrClosed. The first outcome of a command is final, except unresolved
// and held: an operator or the reconciler settles those later, and the
// settled outcome is published as a second event (read it with Outcomes,
// or the record with Status).
func (p *Pending) Wait(ctx context.Context) (Outcome, error) {
	select {
	case <-p.w.ready:
		return p.w.o, nil
	default:
	}
	select {
	case <-p.w.ready:
		return p.w.o, nil
	case <-ctx.Done():
		return Outcome{}, fmt.Errorf("%w for command %s on %s: %w", ErrNoOutcome, p.ID, p.d.topic, ctx.Err())
	case <-p.d.done:
		select {
		case <-p.w.ready: // answered just before the reader stopped
			return p.w.o, nil
		default:
		}
		return Outcome{}, fmt.Errorf("wait for command %s: %w", p.ID, p.d.stopErr())
	}
}

// Forget gives up on the outcome: the client stops holding the wait.
// Call it for a Pending that will not be waited for again when its
// outcome might never come (an executor that is down for good).
func (p *Pending) Forget() { p.d.forget(p.ID, p.w) }

// command validates cmd and fills its defaults.
func (c *Client) command(cmd Command) (schemas.Command, error) {
	if cmd.Action == "" || cmd.Entity == "" {
		return schemas.Command{}, errors.New("onceflight command: Action and Entity are required")
	}
	if cmd.Data != nil {
		if !json.Valid(cmd.Data) || !bytes.HasPrefix(bytes.TrimSpace(cmd.Data), []byte("{")) {
			return schemas.Command{}, fmt.Errorf("onceflight command %s for %q: Data must be a JSON object", cmd.Action, cmd.Entity)
		}
	}
	sc := schemas.Command{
		ID: cmd.ID, Source: cmd.Source, Type: cmd.Action, Subject: cmd.Entity,
		IdempotencyKey: cmd.Key, ExpectedVersion: cmd.ExpectedVersion,
		TraceParent: cmd.TraceParent, Data: cmd.Data,
	}
	if sc.ID == "" {
		sc.ID = uuid.NewString()
	}
	if sc.Source == "" {
		sc.Source = c.source
	}
	if !cmd.Deadline.IsZero() {
		d := cmd.Deadline
		sc.Deadline = &d
	}
	return sc, nil
}

// produce writes sc to the commands topic, keyed by the entity: the
// partitioner hashes the key with murmur2, the executor's entity mapping,
// so the command lands where the entity's records are (docs/guarantees.md).
func (c *Client) produce(ctx context.Context, sc schemas.Command) (Sent, error) {
	if c.keys != nil {
		if err := c.keys.SignControl(&sc); err != nil {
			return Sent{}, fmt.Errorf("sign command %s for %q: %w", sc.Type, sc.Subject, err)
		}
	}
	rec, err := schemas.EncodeCommand(sc, c.mode)
	if err != nil {
		return Sent{}, fmt.Errorf("encode command %s for %q: %w", sc.Type, sc.Subject, err)
	}
	rec.Topic = c.topics.Commands
	rec.Key = []byte(sc.Subject)
	if err := c.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		if c.ctx.Err() != nil { // Close ended it (closing the Kafka client New built)
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return Sent{}, fmt.Errorf("produce command %s for %q to %s: %w", sc.Type, sc.Subject, c.topics.Commands, err)
	}
	key := sc.IdempotencyKey
	if key == "" {
		key = sc.Source + "/" + sc.ID
	}
	return Sent{ID: sc.ID, Key: key, Partition: rec.Partition, Offset: rec.Offset}, nil
}
