package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// watchPartitions stops new work when a topic's partition count changes
// while the executor runs. Entities are placed by murmur2 over the count:
// after a change, an entity's new commands land on another partition than
// its records, versions and in-progress state, and two partitions — two
// owners — could run one entity. There is no safe automatic way on, so the
// executor halts (readyz 503, ERROR every check) until an operator restores
// the count or moves to new topics (README: "Partition counts are fixed").
func (e *Executor) watchPartitions(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	adm := kadm.NewClient(e.plain)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		counts, _, err := e.partitionCounts(ctx, adm)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("partition watch: describe topics", "err", err)
			}
			continue
		}
		for _, topic := range []string{e.cfg.Topics.Commands, e.cfg.Topics.Journal, e.cfg.Topics.Outcomes} {
			if have, want := counts[topic], e.counts[topic]; have != want {
				e.halt(fmt.Errorf("topic %s now has %d partitions, the executor started with %d: entities would move away from their records; new work stopped. Restore the partition count or move to new topics (see README, \"Partition counts are fixed\")", topic, have, want))
			}
		}
	}
}

// halt stops taking new commands for good (this process): polled records
// are no longer dispatched, so their offsets are not committed and a
// correctly configured executor answers them later. Work already running
// finishes and commits.
func (e *Executor) halt(reason error) {
	first := e.halted.CompareAndSwap(nil, &reason)
	e.m.halted.Set(1)
	if first {
		e.log.Error("executor halted", "reason", reason)
	} else {
		e.log.Error("executor halted", "reason", *e.halted.Load())
	}
}

// haltReason returns why the executor stopped taking new work, or nil (NotReady
// and the status say it).
func (e *Executor) haltReason() error {
	if p := e.halted.Load(); p != nil {
		return *p
	}
	return nil
}
