package client

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	internal "github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/schemas"
)

// dispatcher is a client's one outcomes reader: a direct consumer of every
// partition of the outcomes topic, from the end offsets taken when it
// started, handing each outcome to the waiters registered for its
// causation id. Thousands of concurrent Waits cost one fetch loop and a map
// entry each, not a Kafka consumer each.
//
// Why nothing is missed: the reader starts at end offsets taken before any
// command of this client is produced, reads every partition forward
// without gaps, and a waiter is registered before its command is produced.
// An outcome is written after its command, so it is at or after the start,
// and it is read after the waiter exists.
//
// The partitions are those the outcomes topic had when the reader started:
// a partition added later is read only by a new Client. Growing a topic
// under a running deployment moves entities anyway (docs/events.md#execution-records).
type dispatcher struct {
	topic string
	r     *kgo.Client

	// mu guards the waiters and why the reader stopped: the fetch loop
	// and every Pending take it. A leaf lock.
	mu struct {
		sync.Mutex
		// waiters holds, per causation id, the waiters not yet answered
		// (usually one; a caller may submit the same command id twice).
		waiters map[string][]*waiter
		err     error // why the reader stopped; set before done is closed
	}

	done chan struct{} // closed when the fetch loop has returned
}

// waiter is one Pending's slot: the dispatcher fills o and closes ready,
// once, after removing the waiter from the map.
type waiter struct {
	ready chan struct{}
	o     Outcome
}

// startDispatcher takes the end offsets of topic (bounded by ctx) and
// starts the fetch loop (bounded by life).
func startDispatcher(ctx, life context.Context, cl *kgo.Client, topic string) (*dispatcher, error) {
	from, err := internal.EndOffsets(ctx, cl, topic)
	if err != nil {
		return nil, fmt.Errorf("start outcomes reader: %w", err)
	}
	parts := make(map[int32]kgo.Offset, len(from))
	for p, o := range from {
		parts[p] = kgo.NewOffset().At(o)
	}
	r, err := kgo.NewClient(append(slices.Clone(cl.Opts()),
		kgo.ConsumerGroup(""),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("start outcomes reader: %w", err)
	}
	d := &dispatcher{topic: topic, r: r, done: make(chan struct{})}
	d.mu.waiters = map[string][]*waiter{}
	go d.run(life)
	return d, nil
}

// run is the fetch loop. It ends when life ends (Close) or on a fetch
// error franz-go does not retry itself (the topic was deleted, the
// credentials were revoked): waiting on would only hide it until every
// caller's timeout.
func (d *dispatcher) run(life context.Context) {
	var err error
	defer func() {
		d.mu.Lock()
		d.mu.err = err
		d.mu.Unlock()
		close(d.done)
	}()
	for {
		fs := d.r.PollFetches(life)
		if life.Err() != nil {
			err = ErrClosed
			return
		}
		if ferr := internal.FatalFetchErr(fs); ferr != nil {
			err = fmt.Errorf("read %s: %w", d.topic, ferr)
			return
		}
		fs.EachRecord(d.dispatch)
	}
}

// dispatch hands one outcome event to its waiters. Events that are not
// decodable outcomes are skipped: the topic is shared, and a client must
// not fail on someone else's event.
func (d *dispatcher) dispatch(rec *kgo.Record) {
	o, err := decodeOutcome(rec)
	if err != nil {
		slog.Debug("onceflight client: skipping undecodable outcome", "partition", rec.Partition, "offset", rec.Offset, "err", err)
		return
	}
	d.mu.Lock()
	ws := d.mu.waiters[o.CommandID]
	delete(d.mu.waiters, o.CommandID)
	d.mu.Unlock()
	for _, w := range ws {
		w.o = o
		close(w.ready)
	}
}

// register adds a waiter for causation id id. It fails once the reader has
// stopped, so no waiter is left that nothing will answer.
func (d *dispatcher) register(id string) (*waiter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.err != nil {
		return nil, d.mu.err
	}
	select {
	case <-d.done:
		return nil, d.mu.err
	default:
	}
	w := &waiter{ready: make(chan struct{})}
	d.mu.waiters[id] = append(d.mu.waiters[id], w)
	return w, nil
}

// forget removes w, if it is still waiting.
func (d *dispatcher) forget(id string, w *waiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := slices.DeleteFunc(d.mu.waiters[id], func(x *waiter) bool { return x == w })
	if len(ws) == 0 {
		delete(d.mu.waiters, id)
	} else {
		d.mu.waiters[id] = ws
	}
}

// stopErr is why the reader stopped (nil while it runs).
func (d *dispatcher) stopErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.err
}

// stop waits for the fetch loop (whose context the caller has cancelled)
// and closes the reader.
func (d *dispatcher) stop() {
	<-d.done
	d.r.Close()
}

// decodeOutcome decodes an outcome event into the public Outcome.
func decodeOutcome(rec *kgo.Record) (Outcome, error) {
	so, err := schemas.DecodeOutcome(rec)
	if err != nil {
		return Outcome{Event: rec}, &DecodeError{Partition: rec.Partition, Offset: rec.Offset, Err: err}
	}
	return outcomeOf(so, rec), nil
}
