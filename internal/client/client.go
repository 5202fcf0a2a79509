// Package client holds the Kafka plumbing that the CLI's client commands
// (submit, outcomes, status, resolve) share: one way to build a client, and
// the two reads they are made of: waiting for the outcome of a command, and
// scanning the journal for the latest record of a key.
//
// There is no interface in front of *kgo.Client: the tests run against the
// embedded broker (internal/broker) instead of a mock.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/kafkaconf"
)

// New returns a client for brokers with the settings every Onceflight CLI
// command wants; opts are applied after them and so may override them.
//
//   - ProducerLinger(0): franz-go lingers 10ms by default (measured on these machines),
//     which a CLI that produces one record and waits would pay on every call.
//   - read_committed: the executor writes outcomes and journal records in
//     transactions; an aborted write (a fenced zombie's) must never be shown
//     to a user as a result.
//
// Keyed records use franz-go's default partitioner, which hashes keys with
// Kafka's murmur2, the canonical entity mapping (docs/guarantees.md,
// partitioner.ForEntity). A client from New must not be a group consumer:
// WaitOutcome and ScanJournal derive direct readers from its options.
func New(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	if len(brokers) == 0 {
		return nil, errors.New("no brokers given")
	}
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ProducerLinger(0),
		kafkaconf.WireCompression(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// EndOffsets returns the end offset (high watermark) of every partition of
// topic. Take them before producing a command and pass them to WaitOutcome:
// an outcome can only be written after its command, so nothing is missed,
// and nothing older has to be read.
func EndOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	return offsetsOf(listed, err, topic)
}

// offsetsOf flattens one topic's listed offsets (Offsets for one topic).
func offsetsOf(listed kadm.ListedOffsets, err error, topic string) (map[int32]int64, error) {
	out, err := Offsets(listed, err, []string{topic})
	return out[topic], err
}

// Offsets flattens listed offsets per topic, turning a topic that is
// missing, or has no partitions, into an error that names it rather than an
// empty map: a read would wait forever for it, and an audit of it would
// prove nothing.
func Offsets(listed kadm.ListedOffsets, err error, want []string) (map[string]map[int32]int64, error) {
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := map[string]map[int32]int64{}
	var firstErr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			if errors.Is(o.Err, kerr.UnknownTopicOrPartition) && firstErr == nil {
				firstErr = fmt.Errorf("topic %s does not exist (has an executor created it?)", o.Topic)
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("list offsets of %s partition %d: %w", o.Topic, o.Partition, o.Err)
			}
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	if firstErr != nil {
		return nil, firstErr
	}
	for _, t := range want {
		if len(out[t]) == 0 {
			return nil, fmt.Errorf("topic %s does not exist or has no partitions (has an executor created it?)", t)
		}
	}
	return out, nil
}

// Reader returns a short-lived direct consumer of the given partitions that
// shares cl's connection settings (seeds, TLS, SASL, logger). It is a
// separate client so that reads never disturb what cl consumes, and so that
// two settings the reads depend on hold whatever cl was built with:
// read_committed, and control records kept, which is how a scan sees the
// commit marker that often occupies the last offset below the end it stops
// at. extra options are added after all of these (e.g. fetch sizes).
func Reader(cl *kgo.Client, parts map[string]map[int32]kgo.Offset, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := append(slices.Clone(cl.Opts()),
		kgo.ConsumerGroup(""),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(parts),
		// Retention may have deleted the start of a partition
		// between listing offsets and fetching; continue from
		// whatever is left rather than failing.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	opts = append(opts, extra...)
	r, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka reader: %w", err)
	}
	return r, nil
}

// SlogLogger adapts l to franz-go's logger at warn level and above; franz-go's
// info level narrates every connection, which drowns a CLI's output.
func SlogLogger(l *slog.Logger) kgo.Logger { return slogLogger{l} }

type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Level() kgo.LogLevel {
	if s.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelWarn
}

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lvl = slog.LevelError
	case kgo.LogLevelWarn:
		lvl = slog.LevelWarn
	case kgo.LogLevelInfo:
		lvl = slog.LevelInfo
	}
	s.l.Log(context.Background(), lvl, msg, append(keyvals, "component", "kgo")...)
}
