package consumer

// The executor's periodic chores, started by Run: the gauges derived from
// state (every second), the lag per partition, and the pruning of the
// dedupe index.

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// every runs fn every d until ctx ends (the executor's periodic chores).
func every(ctx context.Context, d time.Duration, fn func()) {
	if d <= 0 {
		return
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// refreshGauges (run every second, off the committer) sets the gauges that
// are derived from state rather than counted where the state changes: the
// unresolved records of owned partitions, held partitions, and partitions
// paused by their buffer bounds.
func (e *Executor) refreshGauges() {
	e.refreshUnresolved()
	e.refreshLag()
	ready := 0.0
	if e.Ready() {
		ready = 1
	}
	e.m.ready.Set(ready)
	e.refreshHeld()
	e.mu.Lock()
	e.m.heldParts.Set(float64(len(e.mu.held)))
	e.mu.Unlock()
	if p := e.pipe.Load(); p != nil {
		e.m.paused.Set(float64(p.pausedCount()))
	}
}

// refreshLag sets each owned partition's lag: the commands topic's end
// offset minus the partition's watermark (every command below it is
// answered). Refreshed on a timer, so a stalled executor shows a growing
// lag, not the last value a fetch left; transaction markers are counted
// as answered once consumed (KeepControlRecords), so a caught-up
// partition shows 0. Partitions no longer owned are removed.
func (e *Executor) refreshLag() {
	owned := e.ownedStates()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ends, err := kadm.NewClient(e.plain).ListEndOffsets(ctx, e.cfg.Topics.Commands)
	if err != nil {
		return
	}
	keep := map[int32]bool{}
	for _, st := range owned {
		end, ok := ends.Lookup(e.cfg.Topics.Commands, st.p)
		if !ok || end.Err != nil {
			continue
		}
		wm, ok := st.watermark()
		if !ok {
			wm = st.startOffset()
		}
		if wm < 0 {
			continue
		}
		keep[st.p] = true
		e.m.lag.WithLabelValues(strconv.Itoa(int(st.p))).Set(float64(max(0, end.Offset-wm)))
	}
	e.lag.Lock()
	defer e.lag.Unlock()
	for p := range e.lag.parts {
		if !keep[p] {
			e.m.lag.DeleteLabelValues(strconv.Itoa(int(p)))
		}
	}
	e.lag.parts = keep
}

// refreshUnresolved counts the owned partitions' unresolved records from
// their index.
func (e *Executor) refreshUnresolved() {
	n, err := e.store.CountUnresolved(e.Owned())
	if err != nil {
		return
	}
	e.m.unresolved.Set(float64(n))
}

// prune (run every minute) keeps Pebble's size following retention, not
// traffic: records past dedupe_retention shrink to key stubs and keys past
// key_memory are deleted (dedupe.Store.Prune, bounded per call). The same
// retention drives replay (key_expired); a stub pruned under a shorter one
// (a dedupe_retention raised since) is answered key_expired too
// (decide.Input.Stub), never replayed as a result.
func (e *Executor) prune(ctx context.Context) {
	for ctx.Err() == nil {
		st, err := e.store.Prune(ctx, time.Now(), e.retention.keep, e.retention.memory)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("prune dedupe index", "err", err)
			}
			break
		}
		if st.Stubbed+st.Forgotten > 0 {
			e.log.Debug("dedupe index pruned", "stubbed", st.Stubbed, "forgotten", st.Forgotten)
		}
		if !st.More {
			break
		}
	}
}
