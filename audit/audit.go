package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// ErrBadPartition is returned (wrapped) when Options.Partitions names a
// partition the commands topic does not have: the caller asked for
// something that cannot exist, which a CLI reports as a usage error.
var ErrBadPartition = errors.New("no such partition")

// Options configure Run. The zero value audits the default topics of group
// "onceflight" through Client, which must then be set, or Brokers.
type Options struct {
	// Client is the Kafka client to audit through, built with whatever
	// TLS and SASL the cluster needs. It must not be a group consumer:
	// the reads use separate clients derived from its options, and it
	// is not closed. If nil, Run builds one from Brokers and Kafka.
	Client *kgo.Client
	// Brokers and Kafka (e.g. a kafkaconf.Config's Opts) are used when
	// Client is nil.
	Brokers []string
	Kafka   []kgo.Opt

	// Topics: empty fields take the defaults (docs/README.md).
	Topics schemas.Topics
	// Group is the executors' consumer group, whose committed offsets
	// separate commands that must be answered from those that may still
	// be in flight. Default "onceflight".
	Group string
	// Partitions restricts the command and journal checks; empty: all.
	Partitions []int32
	// MaxDataBytes, KeyMemory, MaxViolations: see Input.
	MaxDataBytes  int
	KeyMemory     time.Duration
	MaxViolations int
	// ControlKeys, if set, are the control keys the executors verify
	// decisions with (`--control-key-file`): accepted decisions must carry
	// a valid signature of one of them.
	ControlKeys *schemas.ControlKeys
}

// Run reads the four topics (read_committed, bounded by the end offsets
// taken at the start) and checks them. Records are checked as they are
// read and then dropped; see the package doc for what is kept.
//
// The group's committed offsets are fetched before any end offset: an
// executor commits a command's offset in the transaction that publishes its
// answer, so every command below an offset committed by then has its answer
// below the ends taken afterwards. Taken the other way round, a command
// committed between the two could look unanswered.
func Run(ctx context.Context, opts Options) (Report, error) {
	if opts.Group == "" {
		opts.Group = "onceflight"
	}
	opts.Topics = opts.Topics.WithDefaults()
	cl := opts.Client
	if cl == nil {
		if len(opts.Brokers) == 0 {
			return Report{}, errors.New("audit: neither Options.Client nor Options.Brokers is set")
		}
		var err error
		cl, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(opts.Brokers...)}, opts.Kafka...)...)
		if err != nil {
			return Report{}, fmt.Errorf("audit: kafka client: %w", err)
		}
		defer cl.Close()
	}
	tp := opts.Topics
	adm := kadm.NewClient(cl)
	committed, err := groupOffsets(ctx, adm, opts.Group, tp.Commands)
	if err != nil {
		return Report{}, err
	}
	all := []string{tp.Commands, tp.Journal, tp.Outcomes, tp.Deadletter}
	listed, err := adm.ListCommittedOffsets(ctx, all...)
	ends, err := offsetsOf(listed, err, all)
	if err != nil {
		return Report{}, err
	}
	listed, err = adm.ListStartOffsets(ctx, all...)
	starts, err := offsetsOf(listed, err, all)
	if err != nil {
		return Report{}, err
	}
	nCmd := len(ends[tp.Commands])
	for _, p := range opts.Partitions {
		if p < 0 || int(p) >= nCmd {
			return Report{}, fmt.Errorf("partition %d: %w (%s has %d partitions)", p, ErrBadPartition, tp.Commands, nCmd)
		}
	}

	// The commands topic is read whole even when partitions are
	// restricted: a misrouted command's forwarded copy is on its
	// entity's partition, which may not be among them.
	ranges := func(topics ...string) map[string]map[int32][2]int64 {
		out := map[string]map[int32][2]int64{}
		for _, t := range topics {
			out[t] = map[int32][2]int64{}
			for p, end := range ends[t] {
				if t == tp.Journal && len(opts.Partitions) > 0 && !slices.Contains(opts.Partitions, p) {
					continue
				}
				if start := starts[t][p]; start < end {
					out[t][p] = [2]int64{start, end}
				}
			}
		}
		return out
	}
	a := newAuditor(Input{
		Topics:            tp,
		CommandPartitions: nCmd,
		Partitions:        opts.Partitions,
		JournalStart:      starts[tp.Journal],
		Committed:         committed,
		MaxDataBytes:      opts.MaxDataBytes,
		KeyMemory:         opts.KeyMemory,
		MaxViolations:     opts.MaxViolations,
		ControlKeys:       opts.ControlKeys,
	})
	// Two passes, because a command is judged by the answers to it:
	// first the journal, outcomes and deadletters, then the commands.
	err = read(ctx, cl, ranges(tp.Journal, tp.Outcomes, tp.Deadletter), func(r *kgo.Record) {
		switch r.Topic {
		case tp.Journal:
			a.journalRecord(r)
		case tp.Outcomes:
			a.outcome(r)
		case tp.Deadletter:
			a.deadletter(r)
		}
	})
	if err != nil {
		return Report{}, err
	}
	if err := read(ctx, cl, ranges(tp.Commands), a.command); err != nil {
		return Report{}, err
	}
	rep := a.finish()
	if nj := len(ends[tp.Journal]); nj != nCmd {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s has %d partitions but %s has %d; they must be equal (docs/README.md)",
			tp.Commands, nCmd, tp.Journal, nj))
	}
	return rep, nil
}

// groupOffsets returns the group's committed offset per partition of topic.
// It asks for stable offsets (KIP-447): an offset commit inside a
// transaction that is still open is waited for rather than skipped, and a
// broker that answers "unstable" is asked again until the transaction ends
// (the executors' transaction timeout bounds that) or ctx does.
func groupOffsets(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	for {
		resp, err := adm.FetchOffsets(kadm.RequireStable(ctx), group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return map[int32]int64{}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("committed offsets of group %s: %w", group, err)
		}
		out := map[int32]int64{}
		var unstable bool
		var firstErr error
		for p, o := range resp[topic] {
			switch {
			case errors.Is(o.Err, kerr.UnstableOffsetCommit):
				unstable = true
			case o.Err != nil:
				firstErr = cmpErr(firstErr, fmt.Errorf("committed offset of %s partition %d: %w", topic, p, o.Err))
			case o.At >= 0:
				out[p] = o.At
			}
		}
		if firstErr != nil {
			return nil, firstErr
		}
		if !unstable {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("committed offsets of group %s: a transaction stays open: %w", group, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// offsetsOf flattens listed offsets per topic, turning a missing topic into
// an error that names it: an audit of a topic that does not exist proves
// nothing.
func offsetsOf(listed kadm.ListedOffsets, err error, want []string) (map[string]map[int32]int64, error) {
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := map[string]map[int32]int64{}
	var firstErr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
				firstErr = cmpErr(firstErr, fmt.Errorf("topic %s does not exist (has an executor created it?)", o.Topic))
			}
			firstErr = cmpErr(firstErr, fmt.Errorf("list offsets of %s partition %d: %w", o.Topic, o.Partition, o.Err))
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

// read calls fn with the committed data records of every partition range
// [start, end), in offset order per partition, and keeps none of them. It
// is one direct consumer of all ranges (no group: the audit must not
// disturb anyone's offsets), read_committed so that a fenced zombie's
// aborted writes are never taken for history, and keeping control records
// because the last offset below a last stable offset is often a
// transaction marker — without it a read would wait for a record that
// never comes.
func read(ctx context.Context, cl *kgo.Client, ranges map[string]map[int32][2]int64, fn func(*kgo.Record)) error {
	parts := map[string]map[int32]kgo.Offset{}
	pending := map[string]map[int32]int64{} // topic -> partition -> last offset to read
	for t, ps := range ranges {
		for p, r := range ps {
			if parts[t] == nil {
				parts[t] = map[int32]kgo.Offset{}
				pending[t] = map[int32]int64{}
			}
			parts[t][p] = kgo.NewOffset().At(r[0])
			pending[t][p] = r[1] - 1
		}
	}
	if len(parts) == 0 {
		return nil
	}
	rd, err := kgo.NewClient(append(slices.Clone(cl.Opts()),
		kgo.ConsumerGroup(""),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(parts),
		// Retention may delete the start of a partition between
		// listing offsets and fetching: read what is left.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return fmt.Errorf("audit reader: %w", err)
	}
	defer rd.Close()

	left := 0
	for _, ps := range pending {
		left += len(ps)
	}
	for left > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read topics: %w", err)
		}
		var fetchErr error
		fs.EachError(func(t string, p int32, err error) {
			if fetchErr == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, kgo.ErrClientClosed) {
				fetchErr = fmt.Errorf("read %s partition %d: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			last, ok := pending[fp.Topic][fp.Partition]
			if !ok {
				return
			}
			for _, rec := range fp.Records {
				if rec.Offset <= last && !rec.Attrs.IsControl() {
					fn(rec)
				}
				if rec.Offset >= last {
					delete(pending[fp.Topic], fp.Partition)
					left--
					break
				}
			}
		})
	}
	return nil
}
