package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/kafkaconf"
)

// rawResult is one run of the design-minimal pipeline.
type rawResult struct {
	inputs  int
	elapsed time.Duration
	cpu     time.Duration // user+sys of this process over elapsed
	// brokerCPU is the broker process's CPU over elapsed (0 with -brokers).
	brokerCPU time.Duration
	polls     int
}

// runRaw runs the design-minimal pipeline issue 8 compares the executor
// with, in this process, on the same broker: n commands (encoded exactly as
// the executor's backlog is) on a topic of b.partitions partitions;
// per input three records (two journal-like, the intent and the final
// record, and one outcome-like, each carrying the input's value, so sizes
// are comparable to the executor's); per poll one Kafka transaction that
// also commits the consumed offsets (polls of at most maxPoll records,
// 500 being the executor's MaxPollRecords; 0 takes whatever is buffered) (kgo.GroupTransactSession, KIP-447,
// the fence the executor relies on) and one synced Pebble batch holding
// one entry per input. It decodes nothing: it is the floor of Kafka and
// Pebble work one command needs, not an executor. The clock is
// transactLoop's.
func (b *bench) runRaw(ctx context.Context, n, maxPoll int) (rawResult, error) {
	in := b.prefix + "raw.in"
	outJ, outO := b.prefix+"raw.journal", b.prefix+"raw.outcomes"
	for _, t := range []string{in, outJ, outO} {
		if err := createTopic(ctx, b.adm, t, b.partitions, nil); err != nil {
			return rawResult{}, err
		}
	}
	if err := b.produceBacklog(ctx, cmdSpec{action: "bench.noop", idPrefix: "raw", keyPrefix: "rk", n: n}, in); err != nil {
		return rawResult{}, err
	}

	db, err := pebble.Open(filepath.Join(b.dir, "raw-pebble"), &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		return rawResult{}, fmt.Errorf("raw: open pebble: %w", err)
	}
	defer db.Close()

	key := make([]byte, 0, 64)
	return b.transactLoop(ctx, "raw", in, n, maxPoll, func(fs kgo.Fetches, produce func(*kgo.Record)) (int, error) {
		batch := db.NewBatch()
		defer batch.Close()
		got := 0
		fs.EachRecord(func(r *kgo.Record) {
			got++
			produce(&kgo.Record{Topic: outJ, Key: r.Key, Value: r.Value})
			produce(&kgo.Record{Topic: outJ, Key: r.Key, Value: r.Value})
			produce(&kgo.Record{Topic: outO, Key: r.Key, Value: r.Value})
			key = binary.BigEndian.AppendUint64(append(key[:0], r.Key...), uint64(r.Offset))
			_ = batch.Set(key, r.Value, nil) // Set on an open batch cannot fail
		})
		if err := batch.Commit(pebble.Sync); err != nil {
			return got, fmt.Errorf("pebble commit: %w", err)
		}
		return got, nil
	})
}

// transactLoop is the raw pipelines' consume-transform-produce loop: a
// group transact session (kgo.GroupTransactSession, KIP-447, the fence
// the executor relies on) reading topic in from its start, and per poll
// (at most maxPoll records; 0 takes whatever is buffered) one transaction
// holding what perPoll produces and the consumed offsets, until n inputs
// are committed. perPoll is given the poll and the transaction's produce,
// does its own work (Pebble) before the transaction ends, and returns how
// many inputs the poll held.
//
// The clock runs from the first non-empty poll (after the group join) to
// the commit of the transaction holding the last input; cpu is this
// process's, brokerCPU the broker's over the same window.
func (b *bench) transactLoop(ctx context.Context, name, in string, n, maxPoll int, perPoll func(kgo.Fetches, func(*kgo.Record)) (int, error)) (rawResult, error) {
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(b.brokers...),
		kgo.TransactionalID(b.prefix+name+"-txn"),
		kgo.ConsumerGroup(b.prefix+name+"-group"),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kafkaconf.WireCompression(),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		return rawResult{}, fmt.Errorf("%s: transact session: %w", name, err)
	}
	defer sess.Close()

	var (
		res        rawResult
		start      time.Time
		cpu0       time.Duration
		broker0    time.Duration
		mu         sync.Mutex
		produceErr error
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if produceErr == nil {
				produceErr = err
			}
			mu.Unlock()
		}
	}
	produce := func(r *kgo.Record) { sess.Produce(ctx, r, promise) }
	for res.inputs < n {
		var fs kgo.Fetches
		if maxPoll > 0 {
			fs = sess.PollRecords(ctx, maxPoll)
		} else {
			fs = sess.PollFetches(ctx)
		}
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("%s: %d of %d inputs: %w", name, res.inputs, n, err)
		}
		if err := fs.Err0(); err != nil {
			return res, fmt.Errorf("%s: fetch: %w", name, err)
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if start.IsZero() {
			start, cpu0, broker0 = time.Now(), selfCPU(), b.brokerCPU()
		}
		if err := sess.Begin(); err != nil {
			return res, fmt.Errorf("%s: begin transaction: %w", name, err)
		}
		got, err := perPoll(fs, produce)
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			return res, fmt.Errorf("%s: end transaction: %w", name, err)
		}
		mu.Lock()
		perr := produceErr
		mu.Unlock()
		if perr != nil {
			return res, fmt.Errorf("%s: produce: %w", name, perr)
		}
		if committed {
			res.inputs += got
			res.polls++
		}
		// Not committed: the session aborted (a rebalance); the
		// inputs are fetched again from the committed offsets.
	}
	res.elapsed = time.Since(start)
	res.cpu = selfCPU() - cpu0
	res.brokerCPU = b.brokerCPU() - broker0
	return res, nil
}

// rawRead reads topic from start to its end offsets as fast as a plain
// read_committed consumer can, the baseline of restore's catch-up.
func (b *bench) rawRead(ctx context.Context, topic string) (int, time.Duration, error) {
	ends, _, err := b.endOffsets(ctx, topic)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, 0, fmt.Errorf("raw read client: %w", err)
	}
	defer cl.Close()
	left := map[int32]int64{}
	for p, o := range ends {
		if o.EpochOffset().Offset > 0 {
			left[p] = o.EpochOffset().Offset
		}
	}
	records := 0
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return records, 0, fmt.Errorf("raw read of %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				records++
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return records, time.Since(start), nil
}

// brokerCPU is the CPU the broker process has used so far, 0 if the run
// did not start it or it cannot be read.
func (b *bench) brokerCPU() time.Duration {
	if b.brokerPID == 0 {
		return 0
	}
	s, err := sampleProc(b.brokerPID)
	if err != nil {
		return 0
	}
	return s.CPU
}

// selfCPU is this process's user+sys CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quietPebble drops Pebble's informational logs (WAL replay on open) that
// would otherwise interleave with the table; errors still reach stderr.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any) {}
func (quietPebble) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "raw pebble: "+format+"\n", args...)
}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
