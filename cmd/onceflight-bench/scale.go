package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/onceflight/onceflight/internal/proctest"
	"github.com/onceflight/onceflight/schemas"
)

// scaleRun is one drain by k executors in one group.
type scaleRun struct {
	k     int
	n     int
	drain time.Duration
	cpu   time.Duration // all k serves together, over the drain
	hwmKB int64         // the largest serve's peak RSS
	audit string
}

func (r scaleRun) rate() float64 { return rate(r.n, r.drain) }

// groupSettle is how long the executors phase waits after the last serve
// is ready before it produces the backlog.
const groupSettle = 5 * time.Second

// executors drains a backlog of n noop commands with k serve processes
// sharing one group (issue 24 item 7: 1, 2 and 3 executors on 12
// partitions). Each k gets topics and a group of its own, so that every
// run starts from the same empty state; the backlog is produced once all
// k are ready and the group has settled, and the clock runs from the first
// outcome to the last, so joins and restores are not counted.
func (b *bench) executors(ctx context.Context, k, n int) (r scaleRun, err error) {
	r.k, r.n = k, n
	saved := struct {
		t schemas.Topics
		g string
	}{b.topics, b.group}
	defer func() { b.topics, b.group = saved.t, saved.g }()
	p := fmt.Sprintf("%sx%d.", b.prefix, k)
	b.topics = schemas.Topics{Commands: p + "commands", Outcomes: p + "outcomes", Journal: p + "journal", Deadletter: p + "deadletter"}
	b.group = p + "executors"
	if err := b.createTopics(ctx); err != nil {
		return r, err
	}
	w, err := b.newOutcomeWatch(ctx)
	if err != nil {
		return r, err
	}
	defer w.close()
	spec := cmdSpec{action: "bench.noop", idPrefix: fmt.Sprintf("x%d", k), keyPrefix: fmt.Sprintf("xk%d", k), n: n}
	var kids []*proctest.Proc
	defer func() {
		for i, c := range kids {
			var sr serveRun
			name := fmt.Sprintf("x%d-%d", k, i)
			stopErr := c.Stop(30 * time.Second)
			sr.errs, sr.warns, sr.firstLog = c.LogCounts()
			if sr.errs > 0 || sr.warns > 0 {
				b.problem("%s: serve logged %d ERROR and %d WARN lines (%s); first: %s", name, sr.errs, sr.warns, c.LogPath, sr.firstLog)
			}
			if stopErr != nil {
				b.problem("%s: %v", name, stopErr)
			}
		}
		if b.audit {
			v, aerr := b.runAudit(ctx, fmt.Sprintf("executors-%d", k))
			r.audit = v
			if aerr != nil {
				b.problem("%v", aerr)
			}
		} else {
			r.audit = "off"
		}
	}()
	// Start them one after another, each joined before the next, as a
	// rolling deployment would; then wait until every one is ready.
	for i := range k {
		c, addr, err := b.startServe(fmt.Sprintf("x%d-%d", k, i), filepath.Join(b.dir, fmt.Sprintf("executors-%d-%d", k, i)), b.inflight)
		if err != nil {
			return r, err
		}
		kids = append(kids, c)
		if _, err := proctest.WaitReady(ctx, c, addr, 2*time.Millisecond); err != nil {
			return r, err
		}
	}
	// The last join moves partitions away from the earlier members in a
	// second (cooperative) rebalance after it is ready: let the group
	// settle before the backlog exists, so that no executor drains part
	// of it alone and no revocation falls inside the measurement.
	time.Sleep(groupSettle)
	if err := b.produceBacklog(ctx, spec, ""); err != nil {
		return r, err
	}
	var s0 []procSample
	for _, c := range kids {
		s, err := sampleProc(c.Pid())
		if err != nil {
			return r, err
		}
		s0 = append(s0, s)
	}
	res, err := w.await(ctx, spec.ids(), b.stall, func() error {
		for _, c := range kids {
			if c.Exited() {
				return c.ExitErr()
			}
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("executors=%d: %w (serve logs in %s)", k, err, b.dir)
	}
	r.drain = res.last.Sub(res.first)
	for i, c := range kids {
		s, err := sampleProc(c.Pid())
		if err != nil {
			return r, err
		}
		r.cpu += s.CPU - s0[i].CPU
		r.hwmKB = max(r.hwmKB, s.HWMKB)
	}
	if s := w.notSucceeded(); s != "" {
		b.problem("executors=%d: outcomes not succeeded: %s", k, s)
	}
	return r, nil
}

// scaleRows runs executors for 1..maxK and returns their rows: rate, the
// ratio to one executor, CPU per command across all of them.
func (b *bench) scaleRows(ctx context.Context, maxK, n int) []row {
	var rows []row
	var one float64
	for k := 1; k <= maxK; k++ {
		fmt.Fprintf(os.Stderr, "executors: %d sharing %d partitions, backlog of %d\n", k, b.partitions, n)
		r, err := b.executors(ctx, k, n)
		if err != nil {
			b.problem("executors=%d: %v", k, err)
			continue
		}
		if k == 1 {
			one = r.rate()
		}
		row := row{Phase: "executors", Measure: fmt.Sprintf("%d executor(s), %d partitions, noop: cmds/s", k, b.partitions), Value: r.rate(), Unit: "/s",
			CPUPerCmd: perInput(r.cpu, r.n), RSSMB: float64(r.hwmKB) / 1024, Audit: r.audit,
			Note: fmt.Sprintf("%d cmds; CPU is all executors together; %d CPUs on this machine", r.n, b.rep.CPUs)}
		if k > 1 && one > 0 {
			row.Vs, row.Ratio = "1 executor", ratio(r.rate(), one)
		}
		rows = append(rows, row)
	}
	return rows
}
