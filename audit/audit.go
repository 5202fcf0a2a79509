package audit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/internal/rangeread"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// ErrBadPartition is returned (wrapped) when Options.Partitions names a
// partition the commands topic does not have: the caller asked for
// something that cannot exist, which a CLI reports as a usage error.
var ErrBadPartition = rangeread.ErrBadPartition

// ErrBadFetchBytes is returned (wrapped) when Options.FetchBytes is out of
// its range, which a CLI reports as a usage error.
var ErrBadFetchBytes = errors.New("out of range")

// CheckFetchBytes is Run's check of a non-zero Options.FetchBytes, for a
// caller that must refuse a bad value before it connects to Kafka.
func CheckFetchBytes(n int) error {
	if n < minFetchBytes || n > math.MaxInt32/3 {
		return fmt.Errorf("fetch bytes %d: %w, must be between %d (64 KiB) and %d", n, ErrBadFetchBytes, minFetchBytes, math.MaxInt32/3)
	}
	return nil
}

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
	// Trusted, if set, are the executors' public keys: every journal
	// record must be covered by a transaction seal one of them signed
	// (CheckJournalSigned). OriginPrefix as in CheckpointOptions.
	Trusted      *trust.TrustedKeys
	OriginPrefix string
	// FetchBytes is the most one fetch of the audit's reads takes of a
	// partition (a fetch takes three times that at most). Memory for
	// fetched records is about 6 × 3 × FetchBytes whatever the number of
	// keys (docs/memory.md#audit); smaller is slower. Default 4 MiB
	// (DefaultFetchBytes); at least 64 KiB.
	FetchBytes int
}

// DefaultFetchBytes is Options.FetchBytes' default: against franz-go's
// 1 MiB, the audit took 15 % less time and the broker 21 % less CPU to
// serve it, for about 60 MB more at its peak (BENCHMARKS.md, round 20
// (audit4)).
const DefaultFetchBytes = 4 << 20

// minFetchBytes is FetchBytes' smallest value: below it a fetch carries a
// handful of records.
const minFetchBytes = 64 << 10

// Run reads the four topics (read_committed, bounded by the end offsets
// taken at the start) and checks them. Records are checked as they are
// read and then dropped; see the package doc for what is kept.
//
// The group's committed offsets are fetched before any end offset: an
// executor commits a command's offset in the transaction that publishes its
// answer, so every command below an offset committed by then has its answer
// below the ends taken afterwards. Taken the other way round, a command
// committed between the two could look unanswered.
func Run(ctx context.Context, opts Options) (rep Report, err error) {
	if opts.Group == "" {
		opts.Group = "onceflight"
	}
	opts.Topics = opts.Topics.WithDefaults()
	if opts.FetchBytes == 0 {
		opts.FetchBytes = DefaultFetchBytes
	}
	if err := CheckFetchBytes(opts.FetchBytes); err != nil {
		return Report{}, fmt.Errorf("audit: %w", err)
	}
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
	ends, err := client.Offsets(listed, err, all)
	if err != nil {
		return Report{}, err
	}
	listed, err = adm.ListStartOffsets(ctx, all...)
	starts, err := client.Offsets(listed, err, all)
	if err != nil {
		return Report{}, err
	}
	nCmd := len(ends[tp.Commands])
	for _, p := range opts.Partitions {
		if p < 0 || int(p) >= nCmd {
			return Report{}, fmt.Errorf("partition %d: %w (%s has %d partitions)", p, ErrBadPartition, tp.Commands, nCmd)
		}
	}

	a := newAuditor(Input{
		Topics:            tp,
		CommandPartitions: nCmd,
		Partitions:        opts.Partitions,
		JournalStart:      starts[tp.Journal],
		CommandsStart:     starts[tp.Commands],
		Committed:         committed,
		Group:             opts.Group,
		MaxDataBytes:      opts.MaxDataBytes,
		KeyMemory:         opts.KeyMemory,
		MaxViolations:     opts.MaxViolations,
		ControlKeys:       opts.ControlKeys,
		Trusted:           opts.Trusted,
		OriginPrefix:      opts.OriginPrefix,
	})
	var outcomes int64 // at most this many outcome ids
	for p, end := range ends[tp.Outcomes] {
		outcomes += max(end-starts[tp.Outcomes][p], 0)
	}
	st, err := openIDStore("", outcomes)
	if err != nil {
		return Report{}, err
	}
	defer func() {
		if cerr := st.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	a.useStore(st, maxStateInMemory)
	a.useMemo()
	if testHookAuditor != nil {
		testHookAuditor(a)
	}
	if err := stream(ctx, cl, a, opts.FetchBytes, opts.Partitions, starts, ends); err != nil {
		return Report{}, err
	}
	rep = a.finish()
	if nj := len(ends[tp.Journal]); nj != nCmd {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s has %d partitions but %s has %d; they must be equal (docs/README.md)",
			tp.Commands, nCmd, tp.Journal, nj))
	}
	return rep, nil
}

// maxStateInMemory bounds the entries of each of the auditor's maps of
// per-partition state (keys, entities, answers, answered commands, outcome
// ids) held in memory: past it, they are written to the temporary store
// (spill), so that the audit's memory stays the same whatever the number
// of keys in a partition. About 100 bytes each: with the four maps and the
// ids, about 40 MB at most. A variable so that a test can make Run spill.
var maxStateInMemory = 1 << 16

// testHookAuditor, when a test sets it, sees Run's auditor once it is
// made (to read how much state it held at most).
var testHookAuditor func(*auditor)

// testHookStep, when a test sets it, is called when stream has read step
// p's records (the last chunk of them may not be checked yet).
// testHookEnd is called as step p's end starts, after its last record
// was checked.
var (
	testHookStep func(p int32)
	testHookEnd  func(p int32)
)

// stepFetchBytes is the most a step's fetch takes of its (at most three)
// partitions together, for a fetch of partBytes a partition. A step holds
// at most six fetches (docs/memory.md#audit), so at most 6 ×
// stepFetchBytes of fetched records whatever the number of keys. The
// client given to Run keeps its own sizes for everything else it reads.
func stepFetchBytes(partBytes int) int32 { return int32(3 * partBytes) }

// stream feeds the auditor a partition at a time, pipelined: the
// deadletters first (few: copies of undecodable commands), then for each
// partition number p the journal and outcomes partitions p together with
// the commands of partition p-1, whose answers were all read in the step
// before. After each step the auditor drops what the finished partitions
// needed (endAnswers, endCommands), so it holds the state of about two
// partitions at a time, whatever the number of partitions and keys
// (docs/memory.md#audit). The steps are read through two clients taking
// turns (rangeread.Steps): near a step's end the other client reads the
// next step's first fetch, and no more, while this one's last records are
// checked.
//
// The commands and outcomes topics are read whole even when partitions
// are restricted, as before streaming: a misrouted command's forwarded
// copy, or the outcome of a too-large one, is on its entity's partition,
// which may not be among them. Only the journal is restricted.
func stream(ctx context.Context, cl *kgo.Client, a *auditor, fetchBytes int, only []int32, starts, ends map[string]map[int32]int64) error {
	tp := a.in.Topics
	rng := func(out map[string]map[int32][2]int64, t string, p int32) {
		end, ok := ends[t][p]
		if !ok {
			return
		}
		if t == tp.Journal && len(only) > 0 && !slices.Contains(only, p) {
			return
		}
		if start := starts[t][p]; start < end {
			if out[t] == nil {
				out[t] = map[int32][2]int64{}
			}
			out[t][p] = [2]int64{start, end}
		}
	}
	dl := map[string]map[int32][2]int64{}
	for p := range ends[tp.Deadletter] {
		rng(dl, tp.Deadletter, p)
	}
	err := rangeread.Read(ctx, cl, dl, func(rs []*kgo.Record) {
		for _, r := range rs {
			a.deadletter(r)
		}
	})
	if err != nil {
		return err
	}
	n := int32(max(len(ends[tp.Commands]), len(ends[tp.Journal]), len(ends[tp.Outcomes])))
	step := func(p int32) map[string]map[int32][2]int64 {
		rs := map[string]map[int32][2]int64{}
		if p < n {
			rng(rs, tp.Journal, p)
			rng(rs, tp.Outcomes, p)
		}
		if p > 0 {
			rng(rs, tp.Commands, p-1)
		}
		return rs
	}
	sets := make([]map[string]map[int32][2]int64, n+1)
	for p := range sets {
		sets[p] = step(int32(p))
	}
	rd, err := rangeread.OpenSteps(cl, sets,
		kgo.FetchMaxPartitionBytes(int32(fetchBytes)), kgo.FetchMaxBytes(stepFetchBytes(fetchBytes)))
	if err != nil {
		return err
	}
	defer rd.Close()
	for p := int32(0); p <= n; p++ {
		err := rd.Each(ctx, a.feed)
		if testHookStep != nil {
			testHookStep(p)
		}
		if err == nil {
			err = a.err
		}
		if err != nil {
			return err
		}
		// The step's last chunk and its end are left to the next feed,
		// which runs them while the next step's first chunk is decoded
		// (or to the flush below).
		a.afterHeld(func() {
			if testHookEnd != nil {
				testHookEnd(p)
			}
			if p < n {
				a.endJournal(p)
				a.endAnswers()
			}
			if p > 0 {
				a.endCommands(p - 1)
			}
		})
	}
	a.flush()
	return a.err
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
