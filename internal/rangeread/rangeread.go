// Package rangeread reads partition ranges of Kafka topics the way an
// auditor must: committed records only, no consumer group, nothing kept.
// The audit and the checkpoint checks share it so that both read the same
// history the same way.
package rangeread

import (
	"context"
	"errors"
	"fmt"
	"maps"

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
// The consumer starts fetching as soon as Open returns. The audit reads
// its steps through Steps instead, whose Readers share two clients. The
// zero Reader reads nothing.
//
// pending, left and nextOff belong to the goroutine that polls (Each's),
// while Each runs; Each returns only after it has ended.
type Reader struct {
	rd      *kgo.Client                // nil: nothing to read
	pending map[string]map[int32]int64 // topic -> partition -> last offset to read
	left    int
	nextOff map[string]map[int32]int64 // topic -> partition -> next offset to fetch, kept while near is set

	// Set by Steps: near is called by the poller once at most nearLeft
	// offsets of the ranges are left to fetch (at the latest with done),
	// done once every range is fetched, both before the fetch's records
	// are handed over.
	near, done func()
	nearLeft   int64
}

func Open(cl *kgo.Client, ranges map[string]map[int32][2]int64) (*Reader, error) {
	r, parts := newReader(ranges)
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

// newReader returns a Reader of ranges without a client, and the offsets
// its client must start at.
func newReader(ranges map[string]map[int32][2]int64) (*Reader, map[string]map[int32]kgo.Offset) {
	parts := map[string]map[int32]kgo.Offset{}
	r := &Reader{pending: map[string]map[int32]int64{}, nextOff: map[string]map[int32]int64{}}
	for t, ps := range ranges {
		for p, rg := range ps {
			if parts[t] == nil {
				parts[t] = map[int32]kgo.Offset{}
				r.pending[t] = map[int32]int64{}
				r.nextOff[t] = map[int32]int64{}
			}
			parts[t][p] = kgo.NewOffset().At(rg[0])
			r.pending[t][p] = rg[1] - 1
			r.nextOff[t][p] = rg[0]
			r.left++
		}
	}
	return r, parts
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
			if n := len(fp.Records); n > 0 && r.near != nil {
				r.nextOff[fp.Topic][fp.Partition] = fp.Records[n-1].Offset + 1
			}
		})
		// Before the records are handed over: what the hooks start
		// is then done while they are checked.
		if r.near != nil && (r.left == 0 || r.leftOffsets() <= r.nearLeft) {
			r.near()
			r.near = nil
		}
		if r.left == 0 && r.done != nil {
			r.done()
		}
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

// leftOffsets is how many offsets of the ranges are left to fetch.
func (r *Reader) leftOffsets() int64 {
	var n int64
	for t, ps := range r.pending {
		for p, last := range ps {
			n += last + 1 - r.nextOff[t][p]
		}
	}
	return n
}

// Steps reads a sequence of range sets, one set after the other (no
// partition may be in two sets), through two clients that take turns: a
// set's partitions are assigned to its client from the start, at their
// ranges' starts, but paused until the set before it is nearly fetched
// (aheadOffsets offsets left). The set's client then reads its first
// fetch, and no more, while the set before it is read and checked on the
// other client: nobody polls it until its set's Each. Once a set's ranges
// are all fetched, its partitions are removed from its client, which also
// ends a fetch of them waiting at the broker for records past their
// ranges; that client's next set is the one after the next.
//
// So what is read ahead of the set being checked is bounded by one fetch,
// as with a client per set opened a set ahead, without a client (its
// connections, metadata and fetch session) per set, and without that
// fetch held for the whole of the set before it.
type Steps struct {
	cls  [2]*kgo.Client // nil: not needed
	sets []*Reader
	next int // the set Each reads next
}

// aheadOffsets is how many offsets of a set are left to fetch when the
// next set's first fetch starts: a few fetches' worth, so that the next
// set's first records are there when its Each starts, while that fetch
// is held only for the end of the set before it.
var aheadOffsets int64 = 4096

// OpenSteps makes the clients of sets and starts fetching the first
// non-empty one. opts are added to the clients' options after cl's (the
// audit's fetch sizes).
func OpenSteps(cl *kgo.Client, sets []map[string]map[int32][2]int64, opts ...kgo.Opt) (*Steps, error) {
	s := &Steps{sets: make([]*Reader, len(sets))}
	var parts []map[string]map[int32]kgo.Offset
	var order []int // the non-empty sets
	for i, rs := range sets {
		r, ps := newReader(rs)
		s.sets[i] = r
		parts = append(parts, ps)
		if r.left > 0 {
			order = append(order, i)
		}
	}
	for k := range min(2, len(order)) {
		// Client k reads sets order[k], order[k+2], …. The very first set
		// is fetched at once; every later partition is paused before it
		// is assigned, so that none is fetched before its turn.
		var first map[string]map[int32]kgo.Offset
		later := map[string]map[int32]kgo.Offset{}
		for j := k; j < len(order); j += 2 {
			if j == 0 {
				first = parts[order[0]]
				continue
			}
			for t, ps := range parts[order[j]] {
				if later[t] == nil {
					later[t] = map[int32]kgo.Offset{}
				}
				maps.Copy(later[t], ps)
			}
		}
		rd, err := client.Reader(cl, first, opts...)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("audit reader: %w", err)
		}
		s.cls[k] = rd
		if len(later) > 0 {
			rd.PauseFetchPartitions(topicPartitions(later))
			rd.AddConsumePartitions(later)
		}
	}
	for j, i := range order {
		r := s.sets[i]
		r.rd = s.cls[j%2]
		r.nearLeft = aheadOffsets
		if j+1 < len(order) {
			nrd, nparts := s.cls[(j+1)%2], topicPartitions(parts[order[j+1]])
			r.near = func() { nrd.ResumeFetchPartitions(nparts) }
		}
		rd, cur := r.rd, topicPartitions(parts[i])
		r.done = func() { rd.RemoveConsumePartitions(cur) }
	}
	return s, nil
}

func topicPartitions(parts map[string]map[int32]kgo.Offset) map[string][]int32 {
	out := make(map[string][]int32, len(parts))
	for t, ps := range parts {
		for p := range ps {
			out[t] = append(out[t], p)
		}
	}
	return out
}

// Each reads the next set as Reader.Each does: when it returns nil, every
// range of the set has been handed to fn.
func (s *Steps) Each(ctx context.Context, fn func([]*kgo.Record)) error {
	if s.next >= len(s.sets) {
		return errors.New("rangeread: every set is read")
	}
	r := s.sets[s.next]
	s.next++
	return r.Each(ctx, fn)
}

// Close ends the clients; a nil Steps (OpenSteps failed) has none.
func (s *Steps) Close() {
	if s == nil {
		return
	}
	for _, rd := range s.cls {
		if rd != nil {
			rd.Close()
		}
	}
}
