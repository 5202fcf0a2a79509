package e2e

// Chaos tests on the built binary (docs/events.md#execution-records, docs/connectors.md): several `onceflight
// serve` processes in one group, a standalone `onceflight broker`, and the
// non-idempotent HTTP service (service_test.go) that applies an effect per
// POST, flags overlapping executions per entity, counts effects per
// idempotency key and refuses writes carrying a stale fencing token.
// Faults: kill -9 mid-call, SIGSTOP past the session timeout, rolling
// restart. The long scenarios run only with ONCEFLIGHT_CHAOS=1 (`make
// chaos`); TestChaosQuick and TestSigstopPastSession always run.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
)

const (
	chaosAction     = "chaos.effect"
	chaosGroup      = "chaos"
	chaosPartitions = 12
	chaosSession    = 3 * time.Second
	chaosRate       = 25 * time.Millisecond // one command every 25ms: 40/s
)

func chaosGate(t *testing.T) {
	t.Helper()
	if os.Getenv("ONCEFLIGHT_CHAOS") != "1" {
		t.Skip("set ONCEFLIGHT_CHAOS=1 (make chaos)")
	}
}

// ---------------------------------------------------------------------------
// Executors.

type chaosExec struct {
	id, httpAddr, dataDir, config string
	p                             *proc
	binary                        string // "": this build
}

type chaosCluster struct {
	t       *testing.T
	brokers string
	session time.Duration
	svc     *apifake.Effects
	execs   []*chaosExec
}

// newChaosCluster starts a broker, the service (each effect takes 20-40ms)
// and n executors in chaosGroup with the given session timeout, and waits
// until each is ready.
func newChaosCluster(t *testing.T, n int, session time.Duration) *chaosCluster {
	t.Helper()
	return newChaosClusterOf(t, n, session, "")
}

// newChaosClusterOf is newChaosCluster with the executors of binary ("":
// this build).
func newChaosClusterOf(t *testing.T, n int, session time.Duration, binary string) *chaosCluster {
	t.Helper()
	c := &chaosCluster{t: t, brokers: startBroker(t), session: session,
		svc: newService(t, chaosPartitions, func() time.Duration { return time.Duration(20+rand.IntN(21)) * time.Millisecond })}
	for i := range n {
		ex := &chaosExec{id: fmt.Sprintf("ex%d", i+1), httpAddr: freePort(t), dataDir: t.TempDir(), binary: binary}
		a := httpAction(c.svc, chaosAction, ex.id, true)
		a.timeout, a.confirmTimeout = 500*time.Millisecond, 3*time.Second
		ex.config = writeConfig(t, "", a)
		c.execs = append(c.execs, ex)
	}
	for _, ex := range c.execs {
		c.start(ex)
	}
	return c
}

// start starts ex (again) and waits until it is ready.
func (c *chaosCluster) start(ex *chaosExec) {
	c.t.Helper()
	ex.p = startServe(c.t, serveOpts{brokers: c.brokers, config: ex.config, executorID: ex.id,
		dataDir: ex.dataDir, httpAddr: ex.httpAddr, group: chaosGroup, partitions: chaosPartitions,
		session: c.session, extra: []string{"--clock-drift", "200ms"}, binary: ex.binary})
}

// killInFlight waits until ex has a call in flight at the service, then
// sends SIGKILL.
func (c *chaosCluster) killInFlight(ex *chaosExec) {
	c.t.Helper()
	n := c.waitInFlight(ex)
	ex.p.Kill()
	c.t.Logf("SIGKILL %s with %d calls in flight at the service", ex.id, n)
}

func (c *chaosCluster) waitInFlight(ex *chaosExec) int {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if n := c.svc.InflightOf(ex.id); n > 0 {
			return n
		}
		if time.Now().After(deadline) {
			c.t.Logf("%s had no call in flight within 15s; acting anyway", ex.id)
			return 0
		}
		time.Sleep(time.Millisecond)
	}
}

var fencedLogRe = regexp.MustCompile(`(?i)fenced|aborted|ownership lost`)

// fencedEvidence returns ex's fenced-writes counter and its fenced/aborted
// log lines from byte offset logFrom on.
func (c *chaosCluster) fencedEvidence(ex *chaosExec, logFrom int) (float64, []string, error) {
	fenced, _, err := ex.p.metric("onceflight_fenced_writes_total", "")
	return fenced, ex.p.LogLines(logFrom, fencedLogRe), err
}

// logMetrics logs the fencing and cycle metrics of every running executor.
func (c *chaosCluster) logMetrics() {
	for _, ex := range c.execs {
		if ex.p.Exited() {
			continue
		}
		fenced, _, err1 := ex.p.metric("onceflight_fenced_writes_total", "")
		aborted, _, err2 := ex.p.metric("onceflight_transactions_total", `result="aborted"`)
		if err := errors.Join(err1, err2); err != nil {
			c.t.Logf("%s: metrics: %v", ex.id, err)
			continue
		}
		c.t.Logf("%s: onceflight_fenced_writes_total=%v onceflight_transactions_total{result=aborted}=%v", ex.id, fenced, aborted)
	}
}

// chaosStream is an endless stream of chaosAction commands over entities
// entities, binary and structured mode in turn; about one in ten repeats a
// recent key (same entity and data).
func chaosStream(prefix string, entities int, seed uint64) func(int) (command, bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var keys []command
	return func(i int) (command, bool) {
		c := command{id: fmt.Sprintf("%s-cmd-%05d", prefix, i), action: chaosAction, structured: i%2 == 1}
		if i >= 20 && rng.IntN(10) == 0 {
			lo := max(0, len(keys)-150)
			prev := keys[lo+rng.IntN(len(keys)-lo)]
			c.key, c.entity, c.repeat = prev.key, prev.entity, true
		} else {
			c.key = fmt.Sprintf("%s-key-%05d", prefix, len(keys))
			c.entity = fmt.Sprintf("%s-ent-%02d", prefix, rng.IntN(entities))
			keys = append(keys, c)
		}
		c.data = fmt.Sprintf(`{"key":%q,"amount":%d}`, c.key, len(c.key))
		return c, true
	}
}

// startChaosProducer produces a chaosStream, one command every chaosRate,
// until finish(true).
func (c *chaosCluster) startProducer(prefix string, entities int, seed uint64) *producer {
	c.t.Helper()
	return startProducer(c.t, c.brokers, chaosStream(prefix, entities, seed), chaosRate, noLimit)
}

// finish ends prod's stream, checks the scenario (checkChaos) and logs the
// executors' metrics.
func (c *chaosCluster) finish(prod *producer, refusalsAllowed bool, statuses ...string) chaosReport {
	c.t.Helper()
	rep := checkChaos(c.t, c, prod.finish(true), refusalsAllowed, statuses...)
	c.logMetrics()
	return rep
}

// ---------------------------------------------------------------------------
// Checks.

type chaosReport struct {
	commands, outcomes, republished, unresolved int
	overlaps, refused, tokenErrs, requests      int
	confirms, afterDeadline                     int
}

// checkChaos checks the outcomes and the service after a scenario. With
// refusalsAllowed (a paused process may resume between the deadline check
// and the write), refused stale writes are reported, not failed; in every
// case no key may have two effects. statuses are the statuses a command
// may end with (nil: succeeded, unresolved).
func checkChaos(t *testing.T, c *chaosCluster, cmds []command, refusalsAllowed bool, statuses ...string) chaosReport {
	t.Helper()
	start := time.Now()
	waitOutcomes(t, fromKafka(c.brokers), commandIDs(cmds), nil, 120*time.Second)
	t.Logf("every command has an outcome %s after the stream ended", time.Since(start).Round(time.Millisecond))
	// Give a late republication a moment to show, then read again.
	time.Sleep(2 * time.Second)
	outs := readOutcomes(t, c.brokers)

	ck := checkOutcomes(t, cmds, outs, checkOpts{republished: true, statuses: statuses,
		explain: func(cmd command) string { return c.svc.EventsFor(cmd.entity) }})
	rep := chaosReport{commands: len(cmds), outcomes: len(outs), republished: ck.republished}

	// Fencing tokens in the records: per entity, in command (partition)
	// order, strictly increasing.
	tokens := map[string][]outcome{} // entity -> first outcome of each key
	for key, o := range ck.first {
		if o.Data.FencingToken != 0 {
			tokens[ck.entity[key]] = append(tokens[ck.entity[key]], o)
		}
	}
	for entity, list := range tokens {
		sort.Slice(list, func(i, j int) bool { return list[i].Data.Command.Offset < list[j].Data.Command.Offset })
		for i := 1; i < len(list); i++ {
			a, b := list[i-1].Data, list[i].Data
			if b.FencingToken <= a.FencingToken || a.Command.Partition != b.Command.Partition {
				t.Errorf("entity %s: fencing token went backwards in the records: key %s (p%d@%d, %s) token %d, then key %s (p%d@%d, %s) token %d",
					entity, a.IdempotencyKey, a.Command.Partition, a.Command.Offset, a.Executor, a.FencingToken,
					b.IdempotencyKey, b.Command.Partition, b.Command.Offset, b.Executor, b.FencingToken)
			}
		}
	}

	// The calls at the service.
	s := c.svc
	overlaps, tokenErrs := s.Overlaps(), s.TokenErrors()
	var refused []string
	for _, e := range s.Refused() {
		refused = append(refused, e.String())
	}
	rep.requests = s.Posts()
	var confirmed []string
	for k, n := range s.ConfirmsBy() {
		confirmed = append(confirmed, fmt.Sprintf("%s x%d", k, n))
		rep.confirms += n
	}
	sort.Strings(confirmed)
	if len(confirmed) > 0 {
		t.Logf("confirms (executor key xN), %d keys: %s", len(confirmed), strings.Join(confirmed[:min(len(confirmed), 20)], ", "))
	}
	var afterDeadline []apifake.Event
	var maxLate time.Duration
	for _, e := range s.EventsWhere(func(e apifake.Event) bool { return e.Verdict != "bad-token" }) {
		if e.Deadline.IsZero() {
			tokenErrs = append(tokenErrs, "request without Onceflight-Deadline: "+e.String())
			continue
		}
		if late := e.Arrived.Sub(e.Deadline); late > 0 {
			afterDeadline = append(afterDeadline, e)
			maxLate = max(maxLate, late)
		}
	}
	// The executor refuses to send past the attempt's deadline, and a new
	// owner waits deadline + --clock-drift (200ms): a write applied later
	// than that could overlap the new owner's.
	for _, e := range afterDeadline {
		switch late := e.Arrived.Sub(e.Deadline); {
		case e.Verdict == "applied" && late > 200*time.Millisecond:
			t.Errorf("write applied %s after its deadline (beyond the 200ms clock drift): %s%s",
				late.Round(time.Millisecond), e, s.EventsFor(e.Entity))
		default:
			t.Logf("call arrived %s after its deadline: %s", late.Round(time.Millisecond), e)
		}
	}
	rep.afterDeadline = len(afterDeadline)
	rep.unresolved = checkEffects(t, ck, s.EffectCounts(), func(key string) string { return s.EventsFor(ck.entity[key]) })
	rep.overlaps, rep.tokenErrs, rep.refused = len(overlaps), len(tokenErrs), len(refused)
	for _, o := range overlaps {
		t.Errorf("overlap at the service: %s", o)
	}
	for _, e := range tokenErrs {
		t.Errorf("fencing token: %s", e)
	}
	for _, r := range refused {
		if refusalsAllowed {
			t.Logf("zombie write refused by the service (stale fencing token): %s", r)
		} else {
			t.Errorf("write with a stale fencing token reached the service (no paused process in this scenario): %s", r)
		}
	}
	t.Logf("REPORT commands=%d outcome_records=%d republished_same_id=%d unresolved_keys=%d overlaps=%d refused_stale_writes=%d token_violations=%d service_posts=%d service_confirms=%d keys=%d posts_after_deadline=%d (max %s late)",
		rep.commands, rep.outcomes, rep.republished, rep.unresolved, rep.overlaps, rep.refused, rep.tokenErrs, rep.requests, rep.confirms, len(ck.statuses),
		rep.afterDeadline, maxLate.Round(time.Millisecond))
	audit(t, c.brokers, chaosGroup)
	if t.Failed() {
		all := map[string]bool{}
		for _, cmd := range cmds {
			all[cmd.key] = true
		}
		dumpKeys(t, c.brokers, all)
	}
	return rep
}

// sigstop pauses zombie past the session timeout while it has calls in
// flight at the service, then resumes it, and logs what it did after.
type sigstop struct {
	fencedBefore float64
	logFrom      int
	resumed      time.Time
}

// pause records zombie's fencing evidence so far and sends SIGSTOP.
func (c *chaosCluster) pause(zombie *chaosExec) sigstop {
	c.t.Helper()
	fenced, _, err := zombie.p.metric("onceflight_fenced_writes_total", "")
	if err != nil {
		c.t.Fatalf("metrics of %s: %v", zombie.id, err)
	}
	st := sigstop{fencedBefore: fenced, logFrom: len(zombie.p.Log())}
	zombie.p.signal(syscall.SIGSTOP)
	return st
}

// resume sends SIGCONT.
func (c *chaosCluster) resume(zombie *chaosExec, st *sigstop) {
	c.t.Helper()
	st.resumed = time.Now()
	zombie.p.signal(syscall.SIGCONT)
}

// fenced reports whether zombie shows, since the pause, a fenced write in
// its metrics or a fenced/aborted cycle or lost ownership in its log.
func (c *chaosCluster) fenced(zombie *chaosExec, st sigstop) bool {
	fenced, lines, err := c.fencedEvidence(zombie, st.logFrom)
	return err == nil && fenced > st.fencedBefore || len(lines) > 0
}

// reportZombie logs the zombie's fencing evidence and its calls within 2s
// of SIGCONT; it fails the test if there is no evidence.
func (c *chaosCluster) reportZombie(zombie *chaosExec, st sigstop) {
	t := c.t
	t.Helper()
	fencedAfter, lines, err := c.fencedEvidence(zombie, st.logFrom)
	if err != nil {
		t.Errorf("metrics of %s after SIGCONT: %v", zombie.id, err)
	}
	t.Logf("zombie %s: onceflight_fenced_writes_total %v before the pause, %v after", zombie.id, st.fencedBefore, fencedAfter)
	for i, l := range lines {
		if i == 10 {
			t.Logf("zombie log: ... %d more", len(lines)-10)
			break
		}
		t.Logf("zombie log: %s", l)
	}
	var late, lateRefused int
	for _, e := range c.svc.EventsWhere(func(e apifake.Event) bool {
		return e.Executor == zombie.id && e.Arrived.After(st.resumed) && e.Arrived.Before(st.resumed.Add(2*time.Second))
	}) {
		late++
		if e.Verdict == "refused" {
			lateRefused++
		}
		if late <= 5 || e.Verdict == "refused" {
			t.Logf("zombie call after SIGCONT (+%s): %s", e.Arrived.Sub(st.resumed).Round(time.Millisecond), e)
		}
	}
	t.Logf("zombie %s: %d calls reached the service within 2s of SIGCONT: %d refused for a stale token",
		zombie.id, late, lateRefused)
	if fencedAfter <= st.fencedBefore && len(lines) == 0 {
		t.Errorf("zombie %s: no fenced write in its metrics (%v -> %v) and no fenced/aborted cycle in its log after the pause",
			zombie.id, st.fencedBefore, fencedAfter)
	}
}

// ---------------------------------------------------------------------------
// Scenarios.

// TestChaosQuick: two executors, one kill -9 mid-call and a restart, ~10 s
// of traffic. Always runs, so `make test` keeps multi-instance coverage.
func TestChaosQuick(t *testing.T) {
	c := newChaosCluster(t, 2, chaosSession)
	prod := c.startProducer("cq", 30, 1)
	time.Sleep(3 * time.Second)
	victim := c.execs[1]
	c.killInFlight(victim)
	time.Sleep(2 * time.Second)
	c.start(victim)
	time.Sleep(5 * time.Second)
	c.finish(prod, false)
}

// TestSigstopPastSession is the short TestChaosSigstop that always runs:
// two executors with a 6 s session. Once ex2 has called for entities of 3
// partitions, the service holds its calls in flight and ex2 is SIGSTOPped
// with them (three, or fewer held for 150ms); the held calls then take
// effect. ex1 takes ex2's partitions over (it has made calls for an entity
// of each partition ex2 had called for); once the pause has also lasted the
// session timeout, ex2 is SIGCONTed. The zombie must be fenced (metrics or
// log), and the records and the service must show every command with one
// outcome id and succeeded, each key with exactly one effect, no
// overlapping executions of an entity, and a clean audit.
func TestSigstopPastSession(t *testing.T) {
	c := newChaosCluster(t, 2, 6*time.Second)
	survivor, zombie := c.execs[0], c.execs[1]
	prod := c.startProducer("sp", 24, 7)
	served := func(before time.Time) map[int32]bool {
		ps := map[int32]bool{}
		for _, e := range c.svc.EventsWhere(func(e apifake.Event) bool { return e.Executor == zombie.id && e.Arrived.Before(before) }) {
			ps[e.Partition] = true
		}
		return ps
	}
	// The zombie works on several partitions, then the service holds its
	// next calls in flight and it is paused with them.
	onceflighttest.WaitFor(t, 60*time.Second, zombie.id+" calling for entities of 3 partitions", func() bool { return len(served(time.Now())) >= 3 })
	g := c.svc.Hold(t, zombie.id)
	// Three calls, or fewer held for 150ms: well within their 500ms
	// attempt timeout, so that no attempt times out while held.
	onceflighttest.WaitFor(t, 30*time.Second, zombie.id+" with calls held in flight", func() bool {
		n, oldest := c.svc.InflightSince(zombie.id)
		return n >= 3 || n > 0 && time.Since(oldest) > 150*time.Millisecond
	})
	st := c.pause(zombie)
	paused := time.Now()
	held := c.svc.InflightOf(zombie.id)
	c.svc.Open(g)
	t.Logf("SIGSTOP %s with %d calls in flight at the service (released now), after %d commands produced", zombie.id, held, prod.sent.Load())

	zparts := served(paused)
	onceflighttest.WaitFor(t, 90*time.Second, fmt.Sprintf("%s taking over the partitions %s had called for (%d)", survivor.id, zombie.id, len(zparts)), func() bool {
		taken := map[int32]bool{}
		for _, e := range c.svc.EventsWhere(func(e apifake.Event) bool {
			return e.Executor == survivor.id && e.Verdict == "applied" && e.Arrived.After(paused) && zparts[e.Partition]
		}) {
			taken[e.Partition] = true
		}
		return len(taken) == len(zparts)
	})
	// The pause lasts at least the session timeout, whatever the
	// takeover took (the session counts from the last heartbeat).
	if d := c.session - time.Since(paused); d > 0 {
		time.Sleep(d)
	}
	t.Logf("%s took over the %d partitions %s had called for; SIGCONT %s after %s paused, %d commands produced",
		survivor.id, len(zparts), zombie.id, zombie.id, time.Since(paused).Round(time.Millisecond), prod.sent.Load())
	c.resume(zombie, &st)
	onceflighttest.WaitFor(t, 60*time.Second, fmt.Sprintf("%s fenced after SIGCONT", zombie.id), func() bool { return c.fenced(zombie, st) })
	c.finish(prod, true, "succeeded")
	c.reportZombie(zombie, st)
}

// TestChaosKill9: three executors; kill -9 one while calls are in flight,
// restart it after a few seconds.
func TestChaosKill9(t *testing.T) {
	chaosGate(t)
	c := newChaosCluster(t, 3, chaosSession)
	prod := c.startProducer("ck", 60, uint64(time.Now().UnixNano()))
	time.Sleep(6 * time.Second)
	victim := c.execs[rand.IntN(len(c.execs))]
	c.killInFlight(victim)
	t.Logf("killed after %d commands produced", prod.sent.Load())
	time.Sleep(5 * time.Second)
	c.start(victim)
	t.Logf("%s restarted after %d commands produced", victim.id, prod.sent.Load())
	time.Sleep(12 * time.Second)
	c.finish(prod, false)
}

// TestChaosSigstop: three executors; SIGSTOP one mid-call for 8 s (past the
// 3 s session timeout), then SIGCONT. The zombie's late writes must be
// refused: its cycle fenced (log and onceflight_fenced_writes_total), any
// HTTP write refused by the service's token check, never a second effect.
func TestChaosSigstop(t *testing.T) {
	chaosGate(t)
	c := newChaosCluster(t, 3, chaosSession)
	prod := c.startProducer("cs", 60, uint64(time.Now().UnixNano()))
	time.Sleep(6 * time.Second)
	zombie := c.execs[rand.IntN(len(c.execs))]
	n := c.waitInFlight(zombie)
	st := c.pause(zombie)
	t.Logf("SIGSTOP %s with %d calls in flight, after %d commands produced", zombie.id, n, prod.sent.Load())
	time.Sleep(8 * time.Second)
	c.resume(zombie, &st)
	t.Logf("SIGCONT %s after %d commands produced", zombie.id, prod.sent.Load())
	time.Sleep(14 * time.Second)
	c.finish(prod, true)
	c.reportZombie(zombie, st)
}

// TestChaosRollingRestart: three executors restarted one after the other
// with SIGTERM, under traffic.
func TestChaosRollingRestart(t *testing.T) {
	chaosGate(t)
	c := newChaosCluster(t, 3, chaosSession)
	prod := c.startProducer("cr", 60, uint64(time.Now().UnixNano()))
	time.Sleep(4 * time.Second)
	for _, ex := range c.execs {
		ex.p.term(30 * time.Second)
		c.start(ex)
		t.Logf("%s restarted after %d commands produced", ex.id, prod.sent.Load())
		time.Sleep(3 * time.Second)
	}
	time.Sleep(4 * time.Second)
	c.finish(prod, false)
}
