package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	internal "github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/kafkaconf"
	"github.com/onceflight/onceflight/schemas"
)

// defaultSource is the CloudEvents source of commands whose Command.Source
// is empty (docs/events.md#command-events: with the id it makes the default idempotency key).
const defaultSource = "onceflight-client"

// ErrClosed is returned (wrapped) by calls on a Client after Close, by
// Wait when the client is closed while it waits, and by a Submit or Send
// that Close interrupted (a record it was producing may have been written).
var ErrClosed = errors.New("onceflight client closed")

// Client submits commands to an Onceflight executor and reads what it
// publishes. It is safe for concurrent use; one per process is the
// intended use, since every client holds Kafka connections and, once it
// has submitted, one outcomes reader shared by all its waiters.
type Client struct {
	cl     *kgo.Client
	own    bool // cl was built by New, so Close closes it
	topics schemas.Topics
	source string
	mode   schemas.Mode
	keys   *schemas.ControlKeys // WithControlKeys

	// ctx ends at Close; it bounds the shared outcomes reader.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards the dispatcher and the closed flag: Send, the first
	// Submit (which starts the dispatcher) and Close take it. A leaf
	// lock.
	mu struct {
		sync.Mutex
		// disp is started by the first Submit and then never replaced
		// (a reader that failed stays failed: its waiters were told
		// why, and later ones are told the same).
		disp   *dispatcher
		closed bool
	}
}

// Option configures New.
type Option func(*config)

type config struct {
	brokers []string
	kopts   []kgo.Opt
	cl      *kgo.Client
	topics  schemas.Topics
	source  string
	mode    schemas.Mode
	logger  *slog.Logger
	keys    *schemas.ControlKeys
}

// WithControlKeys signs every command the client sends with the last key
// of ks (schemas.ControlKeys.SignControl): operator tools need it, because
// an executor started with --control-key-file refuses unsigned decisions
// (resolve, approve, release). Other commands carry the signature unused.
func WithControlKeys(ks *schemas.ControlKeys) Option {
	return func(c *config) { c.keys = ks }
}

// WithBrokers sets the seed brokers, host:port. Required unless
// WithClient is given.
func WithBrokers(addrs ...string) Option {
	return func(c *config) { c.brokers = append(c.brokers, addrs...) }
}

// WithKafkaConfig adds the connection settings of a kafkaconf.Config: TLS,
// SASL and client.id, as parsed from Java/librdkafka properties (docs/configuration.md),
// the same settings `onceflight --kafka-config` takes.
func WithKafkaConfig(kc *kafkaconf.Config) Option {
	return func(c *config) {
		if kc != nil {
			c.kopts = append(c.kopts, kc.Opts()...)
		}
	}
}

// WithKafkaOpts adds franz-go options, for anything kafkaconf does not
// cover (dialer, timeouts, metrics hooks). The partitioner and the
// isolation level are not theirs to change: New sets them after these,
// because the protocol depends on them.
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return func(c *config) { c.kopts = append(c.kopts, opts...) }
}

// WithClient makes the Client use cl, an existing franz-go client, instead
// of building its own; Close then leaves cl open. cl must not be a group
// consumer (the outcomes reader is a separate client derived from cl's
// options) and must keep franz-go's default partitioner, which hashes the
// key (the entity) with Kafka's murmur2 like every Kafka client and the
// executor (docs/guarantees.md). Brokers and Kafka options are ignored.
func WithClient(cl *kgo.Client) Option {
	return func(c *config) { c.cl = cl }
}

// WithTopics overrides the executor's default topic names; empty fields
// keep their defaults.
func WithTopics(t schemas.Topics) Option {
	return func(c *config) { c.topics = t }
}

// WithSource sets the CloudEvents source of commands that do not set their
// own (default "onceflight-client"). Idempotency keys default to source/id, so a
// service should name itself here.
func WithSource(source string) Option {
	return func(c *config) { c.source = source }
}

// WithStructuredMode publishes commands in the CloudEvents structured mode
// (the whole event as JSON in the value) instead of the binary mode
// (attributes in ce_* headers), for consumers of the commands topic that
// only read values. The executor accepts both.
func WithStructuredMode() Option {
	return func(c *config) { c.mode = schemas.Structured }
}

// WithLogger sends franz-go's warnings and errors (and debug output when
// l is at debug level) to l. By default the client logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// New returns a client. It does not connect: the first call that needs
// Kafka does, and Ping checks the connection up front.
//
// A client built here produces with no linger (a submit-and-wait pays no
// batching delay), uncompressed (common clients, e.g. kafkajs without a
// codec plugin, can read what it writes), with franz-go's key hashing
// partitioner (murmur2, the executor's entity mapping), and reads
// read_committed: the executor writes outcomes in transactions, and an
// aborted write (a fenced zombie's) must never be shown as a result.
func New(opts ...Option) (*Client, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	cl, own := c.cl, false
	if cl == nil {
		if len(c.brokers) == 0 {
			return nil, errors.New("onceflight client: no brokers (WithBrokers) and no client (WithClient)")
		}
		kopts := c.kopts
		if c.logger != nil {
			kopts = append([]kgo.Opt{kgo.WithLogger(internal.SlogLogger(c.logger))}, kopts...)
		}
		kopts = append(kopts,
			kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		var err error
		if cl, err = internal.New(c.brokers, kopts...); err != nil {
			return nil, fmt.Errorf("onceflight client: %w", err)
		}
		own = true
	}
	if c.source == "" {
		c.source = defaultSource
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{cl: cl, own: own, topics: c.topics.WithDefaults(), source: c.source, mode: c.mode, keys: c.keys, ctx: ctx, cancel: cancel}, nil
}

// Ping checks that the brokers answer and accept the client's credentials,
// so a wrong password or protocol fails now with the broker's answer
// instead of surfacing as a timeout in the first Wait.
func (c *Client) Ping(ctx context.Context) error {
	if c.closed() {
		return fmt.Errorf("onceflight client: ping: %w", ErrClosed)
	}
	if err := kafkaconf.Ping(ctx, c.cl); err != nil {
		return fmt.Errorf("onceflight client: %w", err)
	}
	return nil
}

// Topics returns the topic names the client uses.
func (c *Client) Topics() schemas.Topics { return c.topics }

// Kafka returns the underlying franz-go client, for reads and admin calls
// this package does not offer. Closing it is Close's job.
func (c *Client) Kafka() *kgo.Client { return c.cl }

// Close stops the outcomes reader, which ends every Wait in progress with
// ErrClosed, and closes the Kafka client if New built it. Records already
// submitted stay submitted: the executor will still answer them.
func (c *Client) Close() {
	// Cancelled before the lock: a first Submit holds it while it starts
	// the reader, and learns "closed" from this instead of making Close
	// wait for brokers that may not answer.
	c.cancel()
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	c.mu.closed = true
	d := c.mu.disp
	c.mu.Unlock()

	// Order: stop the reader first (it uses cl's connection settings,
	// not cl itself, but its waiters should learn "closed", not a
	// fetch error), then the client.
	if d != nil {
		d.stop()
	}
	if c.own {
		c.cl.Close()
	}
}

// closed reports whether Close was called.
func (c *Client) closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.closed
}

// dispatcher returns the shared outcomes reader, starting it on first use.
func (c *Client) dispatcher(ctx context.Context) (*dispatcher, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, ErrClosed
	}
	if c.mu.disp != nil {
		return c.mu.disp, nil
	}
	// Close ends the start too (it cancels c.ctx before it takes mu).
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(c.ctx, stop)()
	d, err := startDispatcher(ctx, c.ctx, c.cl, c.topics.Outcomes)
	if c.ctx.Err() != nil {
		if d != nil {
			d.stop() // its fetch loop ends at once: c.ctx is done
		}
		return nil, ErrClosed
	}
	if err != nil {
		return nil, err
	}
	c.mu.disp = d
	return d, nil
}
