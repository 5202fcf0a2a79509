package client

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Read calls fn, in offset order per partition, for every committed data
// record of topic in a range fixed when it starts:
//
//   - fromStart: from each partition's log start, else from its current end;
//   - follow: then on until ctx ends, else only up to the end taken at the
//     start, so a bounded read terminates while producers keep writing.
//
// The end is the last stable offset, the end a read_committed reader can
// see: waiting for the high watermark could block on a transaction that is
// still open, which a query has no reason to wait for. With neither flag
// nothing is read. A follow ends with ctx's error; an error from fn stops
// the read and is returned.
func Read(ctx context.Context, cl *kgo.Client, topic string, fromStart, follow bool, fn func(*kgo.Record) error) error {
	if !fromStart && !follow {
		return nil
	}
	adm := kadm.NewClient(cl)
	listed, err := adm.ListCommittedOffsets(ctx, topic)
	ends, err := offsetsOf(listed, err, topic)
	if err != nil {
		return err
	}
	starts := ends
	if fromStart {
		listed, err = adm.ListStartOffsets(ctx, topic)
		if starts, err = offsetsOf(listed, err, topic); err != nil {
			return err
		}
	}

	parts := make(map[int32]kgo.Offset)
	pending := make(map[int32]int64) // partition -> last offset to read
	for p, end := range ends {
		start, ok := starts[p]
		if !ok {
			continue
		}
		if follow {
			parts[p] = kgo.NewOffset().At(start)
		} else if start < end {
			parts[p] = kgo.NewOffset().At(start)
			pending[p] = end - 1
		}
	}
	if len(parts) == 0 {
		return nil
	}
	r, err := reader(cl, map[string]map[int32]kgo.Offset{topic: parts})
	if err != nil {
		return err
	}
	defer r.Close()

	for follow || len(pending) > 0 {
		fs := r.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		if err := fatalFetchErr(fs); err != nil {
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
