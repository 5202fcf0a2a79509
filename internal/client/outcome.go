package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// ErrNoOutcome is returned, wrapped with the context's error, when ctx ends
// before the outcome appears. It means "not seen yet", not "not executed":
// the executor may still be working, or down.
var ErrNoOutcome = errors.New("no outcome yet")

// WaitOutcome reads outcomesTopic from the offsets in from (see EndOffsets)
// until an outcome event whose causationid is causationID appears, and
// returns it decoded. Records that are not decodable outcomes are skipped:
// the topic is shared and a CLI must not fail on someone else's event.
func WaitOutcome(ctx context.Context, cl *kgo.Client, outcomesTopic, causationID string, from map[int32]int64) (schemas.Outcome, error) {
	o, _, err := WaitOutcomeRecord(ctx, cl, outcomesTopic, causationID, from)
	return o, err
}

// WaitOutcomeRecord is WaitOutcome that also returns the Kafka record, for
// callers that print the event exactly as it was published.
func WaitOutcomeRecord(ctx context.Context, cl *kgo.Client, outcomesTopic, causationID string, from map[int32]int64) (schemas.Outcome, *kgo.Record, error) {
	if len(from) == 0 {
		return schemas.Outcome{}, nil, errors.New("wait outcome: no start offsets")
	}
	parts := make(map[int32]kgo.Offset, len(from))
	for p, o := range from {
		parts[p] = kgo.NewOffset().At(o)
	}
	r, err := Reader(cl, map[string]map[int32]kgo.Offset{outcomesTopic: parts})
	if err != nil {
		return schemas.Outcome{}, nil, err
	}
	defer r.Close()

	for {
		fs := r.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return schemas.Outcome{}, nil, fmt.Errorf("%w for command %s on %s: %w", ErrNoOutcome, causationID, outcomesTopic, err)
		}
		// Fetch errors that reach us are ones franz-go does not
		// retry itself (e.g. the topic was deleted); waiting on
		// would only hide them until the timeout.
		if err := FatalFetchErr(fs); err != nil {
			return schemas.Outcome{}, nil, fmt.Errorf("read %s: %w", outcomesTopic, err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			if rec.Attrs.IsControl() {
				continue
			}
			o, err := schemas.DecodeOutcome(rec)
			if err != nil {
				slog.Debug("skipping undecodable outcome", "partition", rec.Partition, "offset", rec.Offset, "err", err)
				continue
			}
			if o.CausationID == causationID {
				return o, rec, nil
			}
		}
	}
}

// FatalFetchErr returns the first fetch error that is not the client
// closing or the poll context ending, both of which callers handle
// themselves: the errors franz-go does not retry, which a reader should
// stop on rather than hide until a timeout.
func FatalFetchErr(fs kgo.Fetches) error {
	var first error
	fs.EachError(func(topic string, p int32, err error) {
		if first != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) {
			return
		}
		first = fmt.Errorf("%s partition %d: %w", topic, p, err)
	})
	return first
}
