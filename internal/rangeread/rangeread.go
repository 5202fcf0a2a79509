// Package rangeread reads partition ranges of Kafka topics the way an
// auditor must: committed records only, no consumer group, nothing kept.
// The audit and the checkpoint checks share it so that both read the same
// history the same way.
package rangeread

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/client"
)

// ErrBadPartition is returned (wrapped) when a caller names a partition
// its topic does not have (audit's and the checkpoint checks' --partitions).
var ErrBadPartition = errors.New("no such partition")

// Read calls fn with the committed data records of every partition range
// [start, end), a fetch at a time, in offset order per partition, and
// keeps none of them (Open, then Reader.Each).
func Read(ctx context.Context, cl *kgo.Client, ranges map[string]map[int32][2]int64, fn func([]*kgo.Record)) error {
	rd, err := Open(cl, ranges)
	if err != nil {
		return err
	}
	defer rd.Close()
	return rd.Each(ctx, fn)
}

// Reader reads partition ranges [start, end). It is one direct consumer
// of all of them (no group: the audit must not disturb anyone's offsets),
// read_committed so that a fenced zombie's aborted writes are never taken
// for history, and keeping control records because the last offset below
// a last stable offset is often a transaction marker — without it a read
// would wait for a record that never comes.
//
// The consumer starts fetching as soon as Open returns: the audit opens
// the next partition's Reader before it checks the current one, so the
// connection, the metadata and the first fetch of a step are not waited
// for after the step before it. The zero Reader reads nothing.
type Reader struct {
	rd      *kgo.Client                // nil: nothing to read
	pending map[string]map[int32]int64 // topic -> partition -> last offset to read
	left    int
}

func Open(cl *kgo.Client, ranges map[string]map[int32][2]int64) (*Reader, error) {
	parts := map[string]map[int32]kgo.Offset{}
	r := &Reader{pending: map[string]map[int32]int64{}}
	for t, ps := range ranges {
		for p, rg := range ps {
			if parts[t] == nil {
				parts[t] = map[int32]kgo.Offset{}
				r.pending[t] = map[int32]int64{}
			}
			parts[t][p] = kgo.NewOffset().At(rg[0])
			r.pending[t][p] = rg[1] - 1
			r.left++
		}
	}
	if r.left == 0 {
		return r, nil
	}
	rd, err := client.Reader(cl, parts)
	if err != nil {
		return nil, fmt.Errorf("audit reader: %w", err)
	}
	r.rd = rd
	return r, nil
}

// Close ends the reader's client; a nil Reader (Open failed) has none.
func (r *Reader) Close() {
	if r != nil && r.rd != nil {
		r.rd.Close()
	}
}

// Each calls fn with the records of each fetch until every range is read.
// A goroutine polls the next fetch while fn checks the one before, so
// the consumer asks the broker for more while the audit is busy: at most
// one polled fetch waits for fn, besides the one fn has.
func (r *Reader) Each(ctx context.Context, fn func([]*kgo.Record)) error {
	if r.rd == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []*kgo.Record, 1)
	var pollErr error
	go func() {
		defer close(batches)
		pollErr = r.poll(ctx, batches)
	}()
	for b := range batches {
		fn(b)
	}
	return pollErr
}

// poll sends the wanted records of each fetch to out until every range
// is read.
func (r *Reader) poll(ctx context.Context, out chan<- []*kgo.Record) error {
	for r.left > 0 {
		fs := r.rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read topics: %w", err)
		}
		if err := client.FatalFetchErr(fs); err != nil {
			return fmt.Errorf("read %w", err)
		}
		var batch []*kgo.Record
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			last, ok := r.pending[fp.Topic][fp.Partition]
			if !ok {
				return
			}
			for _, rec := range fp.Records {
				if rec.Offset <= last && !rec.Attrs.IsControl() {
					batch = append(batch, rec)
				}
				if rec.Offset >= last {
					delete(r.pending[fp.Topic], fp.Partition)
					r.left--
					break
				}
			}
		})
		if len(batch) == 0 {
			continue
		}
		select {
		case out <- batch:
		case <-ctx.Done():
			return fmt.Errorf("read topics: %w", ctx.Err())
		}
	}
	return nil
}
