package consumer

// The executor's status record (docs/events.md#executor-status): which
// partitions it owns, holds, pauses, and whether it halted, published to
// the compacted status topic so that a projection of the topics (the
// console) can show what otherwise only /readyz and the metrics of this
// one process say. Publishing is best effort and never in the way of
// commands: a plain (non-transactional) produce, at most one in flight,
// TryProduce so a full buffer drops it instead of waiting; the next tick
// sends the state again, and a record not taken within a period is
// given up.

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// ensureStatusTopic creates the status topic (one partition, compacted).
// Without it the executor runs as before and publishes nothing: the
// status is for people looking, never a reason not to execute.
func (e *Executor) ensureStatusTopic(ctx context.Context, adm *kadm.Client) {
	if e.cfg.StatusInterval < 0 {
		return
	}
	t := e.cfg.Topics.Status
	resp, err := adm.CreateTopic(ctx, 1, -1, e.topicNeeds().Create(t), t)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		e.log.Warn("status topic could not be created: this executor publishes no status (the console shows its partitions' state as unknown); create it compacted with one partition", "topic", t, "err", err)
		return
	}
	e.statusTopic = true
}

// status is the executor's state now; At is left zero so that two
// states compare equal when nothing changed.
func (e *Executor) status() schemas.ExecutorStatus {
	s := schemas.ExecutorStatus{V: schemas.StatusVersion, Executor: e.cfg.ExecutorID,
		EveryMS: e.cfg.StatusInterval.Milliseconds(), Ready: e.Ready(), Owned: []int32{}}
	e.mu.Lock()
	for p := range e.mu.parts {
		s.Owned = append(s.Owned, p)
	}
	for p, err := range e.mu.held {
		if !slices.Contains(s.Owned, p) {
			s.Owned = append(s.Owned, p)
		}
		s.Held = append(s.Held, schemas.HeldPartition{Partition: p, Reason: err.Error()})
	}
	e.mu.Unlock()
	slices.Sort(s.Owned)
	slices.SortFunc(s.Held, func(a, b schemas.HeldPartition) int { return int(a.Partition) - int(b.Partition) })
	if p := e.pipe.Load(); p != nil {
		s.Paused = p.pausedPartitions()
	}
	if err := e.haltReason(); err != nil {
		s.Halted = err.Error()
	} else if err := e.store.Failed(); err != nil {
		s.Halted = "dedupe index failed: " + err.Error()
	}
	return s
}

// pausedPartitions lists the owned partitions paused by their bounds,
// ascending.
func (p *pipeline) pausedPartitions() []int32 {
	states := p.e.ownedStates()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int32
	for _, st := range states {
		if st.buf.paused {
			out = append(out, st.p)
		}
	}
	slices.Sort(out)
	return out
}

// publishStatus checks the state every second and publishes it when it
// changed or StatusInterval passed since the last publish, until ctx
// ends; then it deletes this executor's status (a tombstone), so a
// stopped executor is not shown as owning anything — unless the index
// failed, when the last status names that.
func (e *Executor) publishStatus(ctx context.Context) {
	if !e.statusTopic || e.cfg.StatusInterval < 0 {
		return
	}
	var (
		inflight atomic.Bool
		lastErr  atomic.Pointer[string]
		last     []byte
		lastAt   time.Time
	)
	send := func(rec *kgo.Record) {
		if !inflight.CompareAndSwap(false, true) {
			return // the previous one is still on its way: the next tick sends
		}
		// A record the brokers do not take within a period is given up:
		// the next tick sends a newer state.
		pctx, cancel := context.WithTimeout(ctx, e.cfg.StatusInterval)
		e.plain.TryProduce(pctx, rec, func(_ *kgo.Record, err error) {
			cancel()
			inflight.Store(false)
			if err == nil {
				lastErr.Store(nil)
				return
			}
			msg := err.Error()
			if prev := lastErr.Swap(&msg); (prev == nil || *prev != msg) && ctx.Err() == nil {
				e.log.Warn("executor status not published; trying again", "topic", e.cfg.Topics.Status, "err", err)
			}
		})
	}
	tick := time.NewTicker(min(time.Second, e.cfg.StatusInterval))
	defer tick.Stop()
	for {
		s := e.status()
		cur := wire.EncodeStatus(s)
		if now := time.Now(); !bytes.Equal(cur, last) || now.Sub(lastAt) >= e.cfg.StatusInterval {
			s.At = now.UTC()
			send(&kgo.Record{Topic: e.cfg.Topics.Status, Partition: 0, Key: []byte(e.cfg.ExecutorID), Value: wire.EncodeStatus(s)})
			last, lastAt = cur, now
		}
		select {
		case <-ctx.Done():
			if e.store.Failed() != nil {
				// Run stops the chores on a failed index and stays up to
				// say why: the last word is that reason, not a tombstone
				// that would show the executor as stopped.
				s := e.status()
				s.At = time.Now().UTC()
				e.writeStatusNow(wire.EncodeStatus(s))
				return
			}
			e.writeStatusNow(nil)
			return
		case <-tick.C:
		}
	}
}

// writeStatusNow writes value (nil: this executor's tombstone), waiting at
// most a second: a stopped executor whose tombstone was lost shows as
// stale. It waits on the callback, not on ProduceSync: a record already
// sent to a broker that stopped answering is failed only when the client
// closes, and the stop must not wait for that.
func (e *Executor) writeStatusNow(value []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rec := &kgo.Record{Topic: e.cfg.Topics.Status, Partition: 0, Key: []byte(e.cfg.ExecutorID), Value: value}
	done := make(chan error, 1)
	e.plain.TryProduce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			e.log.Debug("executor status not written at stop", "err", err)
		}
	case <-ctx.Done():
		e.log.Debug("executor status not written at stop: no answer within a second")
	}
}
