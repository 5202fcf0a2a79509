package consumer

import (
	"github.com/onceflight/onceflight/schemas"

	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/kafkaconf"
)

// defaultMaxMessageBytes is max.message.bytes of the topics the executor
// creates: room for the largest command data (512 KiB by default), a capped
// result and the record's fields, with margin; within what managed Kafka
// services allow per topic.
const defaultMaxMessageBytes = outbox.DefaultMaxMessageBytes

// Defaults of Config fields left zero (setDefaults); Defaults shows them.
const (
	defaultGroup                        = "onceflight"
	defaultPartitions                   = 12
	defaultSessionTimeout               = 45 * time.Second
	defaultMaxInflight                  = 64
	defaultMaxPollRecords               = 500
	defaultClockDrift                   = time.Second
	defaultTransactionTimeout           = 10 * time.Second
	defaultMaxBuffered                  = 1024
	defaultMaxBufferedPerPartition      = 2000
	defaultMaxBufferedBytesPerPartition = 64 << 20
	defaultMaxBufferedPerEntity         = 200
	defaultMaxSkippedPerPartition       = 100000
	defaultMaxBufferedBytes             = 4 << 20
	defaultMaxFetchBytes                = 2 << 20
	defaultMaxConcurrentFetches         = 2
	defaultPartitionCheckInterval       = 10 * time.Second
	defaultStatusInterval               = 10 * time.Second
	defaultRestoreTimeout               = 45 * time.Second
	defaultRestoreParallelism           = 4
	defaultRevokeTimeout                = 10 * time.Second
	defaultCacheSize                    = dedupe.DefaultCacheSize
)

// Bounds of MaxFetchBytes: below 64 KiB a fetch carries a handful of
// commands; franz-go takes an int32.
const (
	minFetchBytes = 64 << 10
	maxFetchBytes = 1 << 30
)

// Defaults returns the values New gives the Config fields a caller leaves
// zero, so that a program's flags (serve's) show and apply the same ones
// instead of copies. Brokers and DataDir have none; ExecutorID (hostname-pid)
// and Logger (slog.Default) are left zero, for New to fill in at start, and
// so are KafkaOpts: New's default for them (no client metrics pushed) holds
// only while they are nil, and a caller appending a connection's options
// to Defaults' must get what those options ask for.
func Defaults() Config {
	var c Config
	c.setDefaults()
	c.ExecutorID, c.Logger, c.KafkaOpts = "", nil, nil
	return c
}

// Config is what one executor process needs. Zero values take the defaults
// documented on each field; Defaults returns them.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// DataDir is where the executor keeps its state: a Pebble index of the
	// journal, which is the truth, so New rebuilds it from the journal
	// when it is missing, of an older layout or corrupted (the corrupted
	// one is moved aside and logged). Required; one executor per directory.
	DataDir string
	// CacheSize is the state's block cache in bytes: the hot part of each
	// partition's index should fit in it (docs/memory.md). Default 64 MiB.
	CacheSize int64
	// KafkaOpts are the connection options (TLS, SASL, client id: see
	// package kafkaconf) of every client the executor creates, and of
	// kafka actions that have no connection of their own. Nil: those of
	// no properties (kafkaconf.Config.Opts of nil).
	KafkaOpts []kgo.Opt
	// Group is the consumer group the executors of one deployment share.
	// Default "onceflight".
	Group string
	// Topics; defaults schemas.DefaultTopics.
	Topics schemas.Topics
	// Partitions for the topics this executor creates when missing. Default 12.
	Partitions int
	// SessionTimeout of the consumer group. Default 45s.
	SessionTimeout time.Duration
	// MaxInflight bounds the requests in flight to each external system
	// that has no max_concurrent of its own: every system has a pool of
	// its own (the bulkhead), so a slow one cannot take another's.
	// Default 64.
	MaxInflight int
	// MaxInflightPerPartition bounds the requests in flight from one
	// partition (different entities) to one external system. Default
	// MaxInflight.
	MaxInflightPerPartition int
	// MaxPollRecords bounds one poll. Default 500.
	MaxPollRecords int
	// MaxDataBytes bounds command data. Default 512 KiB.
	MaxDataBytes int
	// ClockDrift is the margin a new owner waits past an inherited
	// execution's deadline before confirming it (docs/guarantees.md). Default 1s.
	ClockDrift time.Duration
	// TransactionTimeout bounds how long a paused zombie's open transaction
	// can stall the new owner (measured on these machines: kgo's 40s default stalls it that
	// long). Default 10s.
	TransactionTimeout time.Duration
	// MaxBuffered bounds commands consumed and not yet committed in the
	// whole process: queued for their entity, running, or answered and
	// staged for the committer's transaction. The poll loop waits when it
	// is reached, so a backlog of any size is drained with at most this
	// many commands in memory (docs/memory.md). Default 1024: two
	// transactions' worth (512 answers each), one staged while the other
	// commits; more only held more in memory (BENCHMARKS.md, "Round 8
	// (mem)", "Round 9 (mem)"); MaxInflight + 512 when that is larger,
	// since it also bounds the executions in flight.
	MaxBuffered int
	// MaxBufferedBytes bounds the bytes of the same commands: a command's
	// record while it is queued or running, the estimated size of its
	// answer (journal record, outcome, ...) once staged. The poll loop
	// waits past it; a worker waits before staging an answer while the
	// staged answers alone are at it (the committer drains them without
	// help, so the wait always ends). Default 4 MiB (~1 200 small staged
	// answers).
	MaxBufferedBytes int
	// MaxFetchBytes is the most one fetch response may carry (franz-go's
	// FetchMaxBytes; a single record batch larger than it still comes
	// whole), and MaxConcurrentFetches how many fetches may be in flight or
	// buffered at once across brokers (franz-go's MaxConcurrentFetches).
	// What franz-go holds ahead of the poll loop is at most their product.
	// Defaults 2 MiB (~5 000 small commands, more than MaxBuffered) and 2.
	MaxFetchBytes        int
	MaxConcurrentFetches int
	// MaxBufferedPerPartition and MaxBufferedBytesPerPartition bound one
	// partition's consumed, unanswered commands; past either its fetching
	// is paused (other partitions go on) until it is down to half.
	// Defaults 2000 and 64 MiB.
	MaxBufferedPerPartition      int
	MaxBufferedBytesPerPartition int
	// MaxBufferedPerEntity bounds the commands one entity holds in memory;
	// past it the entity's later commands are skipped: only their offsets
	// are kept, and they are fetched again when their turn comes, so a
	// hot entity neither fills the process nor stops the other entities of
	// its partition (skip.go). Default 200.
	MaxBufferedPerEntity int
	// MaxSkippedPerPartition bounds the skipped commands (8 bytes of
	// offset each) one partition remembers; past it the partition's
	// fetching is paused until it is down to half. Default 100000.
	MaxSkippedPerPartition int
	// MaxMessageBytes is max.message.bytes of the topics the executor
	// creates, the producer's batch limit, and the size every record is
	// checked against before it is queued. Default 4 MiB.
	MaxMessageBytes int
	// AcceptJournalGap lets restore go past journal records deleted before
	// this executor read them even when they may hold keys younger than
	// key_memory (they could execute again). Default false: such a
	// partition is held, with an ERROR naming it.
	AcceptJournalGap bool
	// ControlKeys verify operator decisions (resolve, approve, release:
	// docs/guarantees.md). Nil: every decision is refused not_allowed.
	ControlKeys *schemas.ControlKeys
	// PartitionCheckInterval is how often the topics' partition counts are
	// checked; a change halts new work. Default 10s; negative disables.
	PartitionCheckInterval time.Duration
	// StatusInterval is how often the executor publishes its status
	// (owned, held, paused partitions, halted) to the status topic, besides
	// within a second of a change (status.go). Default 10s; negative
	// disables.
	StatusInterval time.Duration
	// RestoreTimeout bounds the restore of the partitions of one
	// assignment (run in parallel), so that it ends within the group's
	// rebalance timeout. Default 45s.
	RestoreTimeout time.Duration
	// RestoreParallelism is how many partitions rebuild their state from
	// the journal at once after an assignment. Each restoring partition
	// holds a filter and a table being built (docs/memory.md), so a
	// restore into an empty data dir is the executor's largest resident
	// moment: fewer lowers that peak for a longer restore. The restores of
	// one assignment share RestoreTimeout; one that runs out keeps the
	// batches it committed (with their Progress) and goes on from there
	// at the next assignment. Default 4.
	RestoreParallelism int
	// RevokeTimeout bounds how long a revoked partition's running commands
	// may take to finish before it is released. Default 10s.
	RevokeTimeout time.Duration
	// ExecutorID names this process in records and is its transactional
	// id. Default hostname-pid.
	ExecutorID string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Group == "" {
		c.Group = defaultGroup
	}
	c.Topics = c.Topics.WithDefaults()
	if c.Partitions == 0 {
		c.Partitions = defaultPartitions
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = defaultSessionTimeout
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = defaultMaxInflight
	}
	if c.MaxInflightPerPartition == 0 {
		c.MaxInflightPerPartition = c.MaxInflight
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = defaultMaxPollRecords
	}
	if c.KafkaOpts == nil {
		// What kafkaconf gives a connection with no properties: no
		// KIP-714 client metrics pushed. Options given (kafkaconf's
		// Opts among them) say for themselves.
		c.KafkaOpts = (*kafkaconf.Config)(nil).Opts()
	}
	if c.MaxBuffered == 0 {
		// Executions in flight are buffered commands too: with room for
		// only as many as may run at once, nothing would be staged behind
		// them and the poll loop would wait with the system's slots free.
		c.MaxBuffered = max(defaultMaxBuffered, c.MaxInflight+defaultMaxBuffered/2)
	}
	if c.MaxBufferedPerPartition == 0 {
		c.MaxBufferedPerPartition = min(defaultMaxBufferedPerPartition, c.MaxBuffered)
	}
	if c.MaxBufferedBytesPerPartition == 0 {
		c.MaxBufferedBytesPerPartition = defaultMaxBufferedBytesPerPartition
	}
	if c.MaxBufferedPerEntity == 0 {
		c.MaxBufferedPerEntity = min(defaultMaxBufferedPerEntity, c.MaxBufferedPerPartition)
	}
	if c.MaxSkippedPerPartition == 0 {
		c.MaxSkippedPerPartition = defaultMaxSkippedPerPartition
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = defaultMaxBufferedBytes
	}
	if c.MaxFetchBytes == 0 {
		c.MaxFetchBytes = defaultMaxFetchBytes
	}
	if c.MaxConcurrentFetches == 0 {
		c.MaxConcurrentFetches = defaultMaxConcurrentFetches
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = defaultMaxMessageBytes
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = defaultStatusInterval
	}
	if c.PartitionCheckInterval == 0 {
		c.PartitionCheckInterval = defaultPartitionCheckInterval
	}
	if c.RestoreTimeout == 0 {
		c.RestoreTimeout = defaultRestoreTimeout
	}
	if c.RestoreParallelism == 0 {
		c.RestoreParallelism = defaultRestoreParallelism
	}
	if c.RevokeTimeout == 0 {
		c.RevokeTimeout = defaultRevokeTimeout
	}
	if c.MaxDataBytes == 0 {
		c.MaxDataBytes = schemas.DefaultMaxDataBytes
	}
	if c.ClockDrift == 0 {
		c.ClockDrift = defaultClockDrift
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = defaultTransactionTimeout
	}
	if c.ExecutorID == "" {
		h, _ := os.Hostname()
		c.ExecutorID = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if c.CacheSize <= 0 {
		c.CacheSize = defaultCacheSize
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports what New would refuse in c once its defaults are
// applied, for a caller that wants to refuse bad settings before it starts
// anything else (serve, before its embedded broker).
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

func (c *Config) validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("brokers: at least one broker is required"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir: a directory for the executor's state is required"))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("partitions: %d, must be at least 1", c.Partitions))
	}
	if c.MaxInflight < 1 {
		errs = append(errs, fmt.Errorf("max-inflight: %d, must be at least 1", c.MaxInflight))
	}
	if c.MaxInflightPerPartition < 1 {
		errs = append(errs, fmt.Errorf("max-inflight-per-partition: %d, must be at least 1", c.MaxInflightPerPartition))
	}
	if c.SessionTimeout < time.Second {
		errs = append(errs, fmt.Errorf("session-timeout: %s, must be at least 1s", c.SessionTimeout))
	}
	for _, b := range []struct {
		name string
		v    int
	}{{"max-buffered", c.MaxBuffered}, {"max-buffered-per-partition", c.MaxBufferedPerPartition},
		{"max-buffered-bytes-per-partition", c.MaxBufferedBytesPerPartition}, {"max-buffered-per-entity", c.MaxBufferedPerEntity},
		{"max-skipped-per-partition", c.MaxSkippedPerPartition},
		{"max-buffered-bytes", c.MaxBufferedBytes}, {"max-concurrent-fetches", c.MaxConcurrentFetches},
		{"restore-parallelism", c.RestoreParallelism}} {
		if b.v < 1 {
			errs = append(errs, fmt.Errorf("%s: %d, must be at least 1", b.name, b.v))
		}
	}
	if c.MaxFetchBytes < minFetchBytes || c.MaxFetchBytes > maxFetchBytes {
		errs = append(errs, fmt.Errorf("max-fetch-bytes: %d, must be between %d (64 KiB) and %d (1 GiB)", c.MaxFetchBytes, minFetchBytes, maxFetchBytes))
	}
	if c.MaxDataBytes+recordOverhead > c.MaxMessageBytes {
		errs = append(errs, fmt.Errorf("max-data-bytes: %d leaves no room in a record: with %d bytes of record fields it must fit max-message-bytes %d",
			c.MaxDataBytes, recordOverhead, c.MaxMessageBytes))
	}
	if c.ClockDrift < 0 {
		errs = append(errs, fmt.Errorf("clock-drift: %s, must not be negative", c.ClockDrift))
	}
	return errors.Join(errs...)
}
