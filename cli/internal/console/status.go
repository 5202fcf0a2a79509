package console

// The executors' status records (docs/events.md#executor-status): only an
// executor knows whether it holds, pauses or halted a partition, so each
// publishes that to the compacted status topic and the overview shows the
// latest status naming each partition. A status older than staleAfter of
// its executor's periods is shown as unknown, never as fine: a silent
// executor may be stuck.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// staleAfter is how many of an executor's publishing periods its status
// stays current: a publish may be dropped (one in flight at most) or
// late by a tick.
const staleAfter = 3

// The states of a partition on the overview.
const (
	StateOK      = "processing"
	StateHeld    = "held"
	StatePaused  = "paused"
	StateHalted  = "halted"
	StateUnknown = "unknown"
)

// statusLoop reads the status topic from its start (compaction keeps one
// record per executor) into memory until ctx ends. The topic may not
// exist yet, or ever (executors of an older version): the reader waits
// for it, and the partitions show as unknown meanwhile.
func (p *Projection) statusLoop(ctx context.Context) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(p.brokers...),
		kgo.ConsumeTopics(p.topics.Status),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.MetadataMinAge(time.Second),
	}, p.kopts...)...)
	if err != nil {
		p.log.Error("console projection: status reader", "err", err)
		return
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.log.Debug("console projection: fetch", "topic", t, "partition", part, "err", err)
			}
		})
		changed := false
		fs.EachRecord(func(rec *kgo.Record) {
			changed = p.applyStatus(rec) || changed
		})
		if changed {
			p.notify()
		}
	}
}

// applyStatus keeps rec's status as its executor's latest; an executor's
// tombstone forgets it. A record that is not a status is skipped with a
// log line naming where it is and why.
func (p *Projection) applyStatus(rec *kgo.Record) bool {
	s, ok, err := schemas.DecodeStatus(rec.Key, rec.Value)
	p.st.Lock()
	defer p.st.Unlock()
	if err != nil {
		p.st.bad++
		p.log.Warn("console projection: skipped a status record it cannot decode", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
		return false
	}
	if !ok {
		delete(p.st.status, string(rec.Key))
		return true
	}
	// The topic's order is the executor's: its later record replaces
	// the earlier whatever their clocks say.
	p.st.status[s.Executor] = s
	return true
}

// statusOf fills in s the state of each partition and the count of bad
// status records.
func (p *Projection) statusOf(s *Stats) {
	p.st.Lock()
	defer p.st.Unlock()
	s.BadStatus = p.st.bad
	now := time.Now()
	for i := range s.Partitions {
		ps := &s.Partitions[i]
		ps.State, ps.Reason, ps.StatusFrom, ps.StatusAge = partitionState(ps.Partition, p.st.status, now)
	}
}

// partitionState is what the executors' statuses say of partition part at
// now: the newest status naming it decides, and it is unknown when none
// does or that one is stale.
func partitionState(part int32, statuses map[string]schemas.ExecutorStatus, now time.Time) (state, reason, from string, age time.Duration) {
	var best *schemas.ExecutorStatus
	for _, s := range statuses {
		if slices.Contains(s.Owned, part) && (best == nil || s.At.After(best.At)) {
			best = &s
		}
	}
	if best == nil {
		return StateUnknown, "no executor status names this partition", "", 0
	}
	age = max(0, now.Sub(best.At))
	if age > staleAfter*best.Every() {
		return StateUnknown, fmt.Sprintf("the latest status of %s is %s old (it publishes every %s)", best.Executor, age.Round(time.Second), best.Every()), best.Executor, age
	}
	switch {
	case best.Halted != "":
		return StateHalted, best.Halted, best.Executor, age
	case slices.ContainsFunc(best.Held, func(h schemas.HeldPartition) bool { return h.Partition == part }):
		i := slices.IndexFunc(best.Held, func(h schemas.HeldPartition) bool { return h.Partition == part })
		return StateHeld, best.Held[i].Reason, best.Executor, age
	case slices.Contains(best.Paused, part):
		return StatePaused, "buffered commands at their bound: fetching paused until half of them are done", best.Executor, age
	}
	return StateOK, "", best.Executor, age
}
