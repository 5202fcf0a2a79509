package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// StartKind says where a read begins in each partition.
type StartKind int

const (
	// StartEnd begins at the current end: only records written from now.
	StartEnd StartKind = iota
	// StartBeginning begins at the oldest retained record.
	StartBeginning
	// StartOffset begins at Start.Offset: an offset if >= 0, else that
	// many records before the end (kcat's -o -N).
	StartOffset
	// StartTime begins at the first record stamped at or after Start.Time.
	StartTime
)

// Start is where a read begins.
type Start struct {
	Kind   StartKind
	Offset int64
	Time   time.Time
}

// Range is what ReadRange reads.
type Range struct {
	// Partitions to read; nil reads all.
	Partitions []int32
	Start      Start
	// Until, if set, ends the read: at the offsets of the first records
	// stamped after it when it has passed (it then ends even with
	// Follow), else when it passes.
	Until time.Time
	// Follow reads on past the current end until ctx ends; without it
	// (and without a future Until) the read stops at the end taken when
	// it starts.
	Follow bool
}

// Read calls fn, in offset order per partition, for every committed data
// record of topic in a range fixed when it starts:
//
//   - fromStart: from each partition's log start, else from its current end;
//   - follow: then on until ctx ends, else only up to the end taken at the
//     start, so a bounded read terminates while producers keep writing.
//
// With neither flag nothing is read. See ReadRange.
func Read(ctx context.Context, cl *kgo.Client, topic string, fromStart, follow bool, fn func(*kgo.Record) error) error {
	if !fromStart && !follow {
		return nil
	}
	r := Range{Follow: follow}
	if fromStart {
		r.Start.Kind = StartBeginning
	}
	return ReadRange(ctx, cl, topic, r, fn)
}

// ReadRange calls fn, in offset order per partition, for every committed
// data record of topic in r. The end of a bounded read is the last stable
// offset, the end a read_committed reader can see: waiting for the high
// watermark could block on a transaction that is still open, which a query
// has no reason to wait for. Starts are clamped to what the partition
// holds, so an offset past the end waits for new records instead of
// jumping back to the start. A follow ends with ctx's error (nil when a
// future Until passed); an error from fn stops the read and is returned.
func ReadRange(ctx context.Context, cl *kgo.Client, topic string, r Range, fn func(*kgo.Record) error) error {
	adm := kadm.NewClient(cl)
	listed, err := adm.ListCommittedOffsets(ctx, topic)
	ends, err := offsetsOf(listed, err, topic)
	if err != nil {
		return err
	}
	for _, p := range r.Partitions {
		if _, ok := ends[p]; !ok {
			return fmt.Errorf("topic %s has no partition %d (it has %d)", topic, p, len(ends))
		}
	}
	want := func(p int32) bool { return r.Partitions == nil || slices.Contains(r.Partitions, p) }

	listed, err = adm.ListStartOffsets(ctx, topic)
	logStarts, err := offsetsOf(listed, err, topic)
	if err != nil {
		return err
	}
	starts := map[int32]int64{}
	switch r.Start.Kind {
	case StartEnd:
		starts = ends
	case StartBeginning:
		starts = logStarts
	case StartOffset:
		for p, end := range ends {
			if r.Start.Offset >= 0 {
				starts[p] = r.Start.Offset
			} else {
				starts[p] = end + r.Start.Offset
			}
		}
	case StartTime:
		listed, err = adm.ListOffsetsAfterMilli(ctx, r.Start.Time.UnixMilli(), topic)
		if starts, err = offsetsOf(listed, err, topic); err != nil {
			return err
		}
	}

	follow := r.Follow
	if !r.Until.IsZero() {
		if time.Until(r.Until) > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, r.Until)
			defer cancel()
			follow = true
		} else {
			// The first offset stamped after Until, no further than
			// what is committed.
			listed, err = adm.ListOffsetsAfterMilli(ctx, r.Until.UnixMilli()+1, topic)
			after, err := offsetsOf(listed, err, topic)
			if err != nil {
				return err
			}
			for p, off := range after {
				ends[p] = min(ends[p], off)
			}
			follow = false
		}
	}

	parts := make(map[int32]kgo.Offset)
	pending := make(map[int32]int64) // partition -> last offset to read
	floor := make(map[int32]int64)   // partition -> first offset to show
	for p, end := range ends {
		start, ok := starts[p]
		if !ok || !want(p) {
			continue
		}
		start = max(start, logStarts[p])
		if follow {
			// Fetching past the high watermark is out of range, which
			// the reader answers by starting over at the log start;
			// fetch from the end and skip up to start instead.
			parts[p] = kgo.NewOffset().At(min(start, end))
			floor[p] = start
		} else if start < end {
			parts[p] = kgo.NewOffset().At(start)
			pending[p] = end - 1
		}
	}
	if len(parts) == 0 {
		return nil
	}
	err = readParts(ctx, cl, topic, parts, pending, follow, func(rec *kgo.Record) error {
		if rec.Offset < floor[rec.Partition] {
			return nil
		}
		return fn(rec)
	})
	if follow && !r.Until.IsZero() && errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(r.Until) {
		return nil
	}
	return err
}

// readParts reads parts from their offsets: to the last offsets in pending
// unless follow, then on until ctx ends.
func readParts(ctx context.Context, cl *kgo.Client, topic string, parts map[int32]kgo.Offset, pending map[int32]int64, follow bool, fn func(*kgo.Record) error) error {
	r, err := Reader(cl, map[string]map[int32]kgo.Offset{topic: parts})
	if err != nil {
		return err
	}
	defer r.Close()
	for follow || len(pending) > 0 {
		fs := r.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		if err := FatalFetchErr(fs); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		var fnErr error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			last, bounded := pending[fp.Partition]
			for _, rec := range fp.Records {
				if fnErr != nil {
					return
				}
				if !follow && (!bounded || rec.Offset > last) {
					return
				}
				if !rec.Attrs.IsControl() {
					fnErr = fn(rec)
				}
				// The last offset is often a transaction
				// marker; we see it because the reader keeps
				// control records.
				if bounded && rec.Offset >= last {
					delete(pending, fp.Partition)
					bounded = false
				}
			}
		})
		if fnErr != nil {
			return fnErr
		}
	}
	return nil
}
