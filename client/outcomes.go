package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	internal "github.com/onceflight/onceflight/internal/client"
)

// Start is where a read begins, in every partition read; build one with
// FromEnd, FromBeginning, FromOffset or FromTime.
type Start = internal.Start

// FromEnd starts at the current end: only new events.
func FromEnd() Start { return Start{Kind: internal.StartEnd} }

// FromBeginning starts at the oldest retained event.
func FromBeginning() Start { return Start{Kind: internal.StartBeginning} }

// FromOffset starts at offset n, or, if n < 0, -n events before the end.
func FromOffset(n int64) Start { return Start{Kind: internal.StartOffset, Offset: n} }

// FromTime starts at the first event stamped at or after t.
func FromTime(t time.Time) Start { return Start{Kind: internal.StartTime, Time: t} }

// Range is what ReadOutcomes reads:
//
//   - Partitions: the partitions to read; nil reads all (an entity's
//     events are all in one partition).
//   - Start: where to begin in each.
//   - Until, if set, ends the read: at the first events stamped after it
//     when it has passed (it then ends even with Follow), else when it
//     passes.
//   - Follow reads on past the current end until ctx ends; without it
//     (and without a future Until) the read stops at the end taken when it
//     starts, so a replay terminates while the executor keeps writing.
type Range = internal.Range

// errStop ends a read when the consumer of an iterator stops early.
var errStop = errors.New("stop")

// Outcomes returns every outcome event from from on, following new ones
// until ctx ends: what a subscriber ranges over. It is ReadOutcomes with
// Follow.
//
//	for o, err := range c.Outcomes(ctx, client.FromEnd()) {
//		if err != nil { ... }
//		handle(o) // drop o.ID if already handled: republications repeat it
//	}
//
// Each call reads with its own direct consumer (no consumer group, nothing
// committed). A Start applies to every partition read, so to resume after
// a restart, store the last Event.Offset per partition and read each
// partition on from there, one ReadOutcomes each:
// Range{Partitions: []int32{p}, Start: FromOffset(last + 1), Follow: true}.
func (c *Client) Outcomes(ctx context.Context, from Start) iter.Seq2[Outcome, error] {
	return c.ReadOutcomes(ctx, Range{Start: from, Follow: true})
}

// ReadOutcomes returns the committed outcome events of r, in offset order
// per partition (partitions may interleave). A record that is not a
// decodable outcome is yielded as a *DecodeError with its Event set, and
// the read goes on if the loop does. A failed read yields its error and
// ends; so does a follow when ctx ends (with ctx's error), except one
// ended by a passed Until, which ends without error.
func (c *Client) ReadOutcomes(ctx context.Context, r Range) iter.Seq2[Outcome, error] {
	return func(yield func(Outcome, error) bool) {
		if c.closed() {
			yield(Outcome{}, fmt.Errorf("read %s: %w", c.topics.Outcomes, ErrClosed))
			return
		}
		err := internal.ReadRange(ctx, c.cl, c.topics.Outcomes, r, func(rec *kgo.Record) error {
			if !yield(decodeOutcome(rec)) {
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(Outcome{}, err)
		}
	}
}
