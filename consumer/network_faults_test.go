package consumer_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/faultnet"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestFaultNetworkCutAndStall runs two executors; every connection of A to
// the broker goes through a faultnet.Net. A's network is stalled briefly
// (no rebalance needed), then cut for longer than the session timeout (B
// takes A's partitions), then healed (A is fenced, rejoins and becomes
// ready again). Commands submitted before, during and after the faults
// each get one outcome and take effect once, and the audit passes.
func TestFaultNetworkCutAndStall(t *testing.T) {
	h := onceflighttest.New(t)
	fn := faultnet.New()
	a, b := startPair(t, h, fn, netTune)
	var ids []string
	seen := map[string][]schemas.Outcome{}
	batch := func(tag string, n int) { ids = batch(t, h, ids, tag, n) }
	batch("before", 6)
	h.Outcomes(len(ids), seen, nil)

	fn.Stall()
	batch("stall", 6)
	time.Sleep(500 * time.Millisecond) // a stall well within the session
	fn.Resume()
	h.Outcomes(len(ids), seen, nil)

	fn.Cut()
	batch("cut", 6)
	onceflighttest.WaitFor(t, 30*time.Second, "B to take every partition", func() bool { return b.Owns(3) })
	h.Outcomes(len(ids), seen, nil)
	fn.Resume()
	onceflighttest.WaitFor(t, 30*time.Second, "A ready again after the cut", a.Ex.Ready)
	batch("after", 6)
	h.Outcomes(len(ids), seen, nil)

	stopAndCheck(t, h, []*onceflighttest.Node{a, b}, ids, func(id string) string { return "k-" + id })
}

// netTune is the executors' config in the network tests: a 2s session so a
// fault past it is short, and transactions that time out soon after.
func netTune(c *consumer.Config) {
	c.SessionTimeout = 2 * time.Second
	c.RevokeTimeout = 200 * time.Millisecond
	c.TransactionTimeout = 3 * time.Second
}

// TestFaultNetworkOneWayBlackhole loses one direction of A's traffic for
// longer than the session timeout while the other flows. Out: A's requests
// (heartbeats, fetches, its transactions' offsets and EndTxn) vanish while
// what the broker already owed A still arrives. In: the broker receives and
// acts on everything A sends (heartbeats reach the group, a transaction A
// ends is committed) and A never hears an answer. Either way A's session
// expires, B takes every partition and answers the commands A held, and
// when the network heals A's broken connections are reset, its old
// membership is gone and it is fenced and rejoins. Commands of a few
// entities are in flight at the moment of the fault against a
// non-idempotent service: each takes effect once, no entity ever has two
// requests in flight, and the audit passes.
func TestFaultNetworkOneWayBlackhole(t *testing.T) {
	for _, dir := range []faultnet.Direction{faultnet.Out, faultnet.In} {
		t.Run(dir.String(), func(t *testing.T) {
			h, _ := newClusterHarness(t)
			svc := newEffectService(t, 20*time.Millisecond, nil)
			h.UseConfig(effectsYAML(svc, "1s"))
			fn := faultnet.New()
			a, b := startPair(t, h, fn, netTune)
			before := h.GroupMembers()
			var ids []string
			want := map[string]int{}
			seen := map[string][]schemas.Outcome{}
			batch := func(tag string, n int) {
				for i := range n {
					id := fmt.Sprintf("%s%d", tag, i)
					ids = append(ids, id)
					want["k-"+id] = 1
					h.SubmitAction(id, "pay.call", fmt.Sprintf("order-%d", i%6), "k-"+id, `{"amount":1}`)
				}
			}
			batch("before", 6)
			h.Outcomes(len(ids), seen, nil)

			batch("edge", 12) // some of A's are in flight when the fault starts
			fn.Blackhole(dir)
			batch("during", 6)
			onceflighttest.WaitFor(t, 30*time.Second, "B to take every partition", func() bool { return b.Owns(3) })
			// The broker ended A's session: the group is B alone (A's
			// membership from before is the one that went).
			var aOld []string
			onceflighttest.WaitFor(t, 30*time.Second, "the group to be B alone", func() bool {
				ms := h.GroupMembers()
				aOld = slices.DeleteFunc(slices.Clone(before), func(m string) bool { return slices.Contains(ms, m) })
				return len(ms) == 1
			})
			h.Outcomes(len(ids), seen, nil)
			if fn.Swallowed(dir) == 0 {
				t.Fatalf("the %s blackhole swallowed nothing: the test did not test it", dir)
			}
			fn.Resume()
			// A may read ready on its view from before the fault for a
			// moment: wait for the group to hold it again too.
			onceflighttest.WaitFor(t, 30*time.Second, "A ready again after the blackhole, in a group of two", func() bool {
				return a.Ex.Ready() && len(a.Ex.Owned()) > 0 && len(h.GroupMembers()) == 2
			})
			// A came back under a new membership: the old one stays gone.
			after := h.GroupMembers()
			if len(after) != 2 || slices.ContainsFunc(after, func(m string) bool { return slices.Contains(aOld, m) }) {
				t.Errorf("members before the blackhole %v, A's old %v, after the heal %v: want two members, none of A's old", before, aOld, after)
			}
			batch("after", 6)
			h.Outcomes(len(ids), seen, nil)

			if err := a.Stop(); err != nil {
				t.Errorf("A: %v", err)
			}
			if err := b.Stop(); err != nil {
				t.Errorf("B: %v", err)
			}
			all := h.AllOutcomes()
			kafkatest.OneOutcomeEach(t, all, ids)
			for _, id := range ids {
				if s := all[id][0].Record.Status; s != schemas.StatusSucceeded {
					t.Errorf("%s: %s %s", id, s, code(all[id][0]))
				}
			}
			svc.Check(t, want)
			t.Logf("%s: swallowed %d bytes, A fenced writes %v, keys A began and B finished %d", dir, fn.Swallowed(dir),
				a.Counter("onceflight_fenced_writes_total", nil), inherited(h.JournalAll(), "A", "B"))
			h.Audit()
		})
	}
}

// inherited counts the keys with an in_progress record by from and a final
// record by to in the journal: executions that changed hands mid-flight.
func inherited(recs []schemas.Record, from, to string) int {
	began, n := map[string]bool{}, 0
	for _, r := range recs {
		k := r.Entity + "/" + r.IdempotencyKey
		switch {
		case r.Executor == from && r.Status == schemas.StatusInProgress:
			began[k] = true
		case r.Executor == to && r.Status.Final() && began[k]:
			n++
			delete(began, k)
		}
	}
	return n
}

// assignment is what the group looks like from the outside: its member ids
// and each node's owned partitions.
func assignment(h *onceflighttest.Harness, nodes ...*onceflighttest.Node) string {
	ms := h.GroupMembers()
	slices.Sort(ms)
	s := fmt.Sprint(ms)
	for _, n := range nodes {
		o := n.Ex.Owned()
		slices.Sort(o)
		s += fmt.Sprintf(" %s:%v", n.ID, o)
	}
	return s
}

// TestFaultNetworkShortFaultsNoRebalance hits A's network with faults well
// under its 3s session while commands flow. The ones that drop traffic
// without a reset — a stall, a one-way blackhole either way, 300ms each —
// may not cost a rebalance: the group receives no JoinGroup, and its
// members and the assignment are what they were. A 300ms cut that refuses
// connections (a reset, as from a firewall's REJECT or a restarting
// listener) is different, and last: kgo v1.22.3 does not retry a
// heartbeat whose coordinator dial is refused (a non-timeout dial error
// inside the request), so A may drop its session and rejoin, and an
// EndTxn whose dial is refused makes the executor recreate its client (a
// new member). For it the test asserts only what must hold anyway: both
// ready again with every partition owned, and no lost command. Every
// command is answered once with one effect.
func TestFaultNetworkShortFaultsNoRebalance(t *testing.T) {
	h, c := newClusterHarness(t)
	joins := groupJoins(c)
	tune := func(c *consumer.Config) {
		netTune(c)
		c.SessionTimeout = 3 * time.Second
	}
	fn := faultnet.New()
	a, b := startPair(t, h, fn, tune)
	var ids []string
	seen := map[string][]schemas.Outcome{}
	batch := func(tag string, n int) { ids = batch(t, h, ids, tag, n) }
	batch("warm", 6)
	h.Outcomes(len(ids), seen, nil)
	// Settled: B's join may have started a second, cooperative round.
	onceflighttest.WaitFor(t, 30*time.Second, "the group to settle", func() bool {
		j := joins()
		time.Sleep(500 * time.Millisecond)
		return joins() == j
	})
	j0, a0 := joins(), assignment(h, a, b)

	faults := []struct {
		name  string
		on    func()
		reset bool // connections refused: kgo may rejoin
	}{
		{"stall", fn.Stall, false},
		{"blackhole out", func() { fn.Blackhole(faultnet.Out) }, false},
		{"blackhole in", func() { fn.Blackhole(faultnet.In) }, false},
		{"cut", fn.Cut, true},
	}
	for _, f := range faults {
		f.on()
		batch(strings.ReplaceAll(f.name, " ", "-"), 6)
		time.Sleep(300 * time.Millisecond) // a tenth of the session
		fn.Resume()
		h.Outcomes(len(ids), seen, nil)
		if f.reset {
			onceflighttest.WaitFor(t, 30*time.Second, "A and B ready with every partition after the "+f.name, func() bool {
				return a.Ex.Ready() && b.Ex.Ready() && len(a.Ex.Owned())+len(b.Ex.Owned()) == 3
			})
			t.Logf("a short %s: %d JoinGroups, assignment %s (was %s)", f.name, joins()-j0, assignment(h, a, b), a0)
			continue
		}
		if j, as := joins(), assignment(h, a, b); j != j0 || as != a0 {
			t.Fatalf("after a short %s: %d JoinGroups since the start (want none), assignment %s, was %s", f.name, j-j0, as, a0)
		}
	}
	stopAndCheck(t, h, []*onceflighttest.Node{a, b}, ids, func(id string) string { return "k-" + id })
}

// TestFaultNetworkLatency runs both executors with 150ms added to every
// write (a round trip 150ms longer, 75ms each way) from the start, under
// a stream of commands: every command is answered once with one effect,
// and the latency costs no rebalance once the group has formed.
func TestFaultNetworkLatency(t *testing.T) {
	h, c := newClusterHarness(t)
	joins := groupJoins(c)
	// An intent's commit takes several round trips, longer than the
	// 500ms timeout here: the attempt's next try leaves room for the
	// commit (effect.Perform), or no attempt would ever be sent.
	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 500ms\n", h.Effects))
	start := time.Now()
	var nodes []*onceflighttest.Node
	for _, id := range []string{"A", "B"} {
		fn := faultnet.New()
		fn.SetLatency(150 * time.Millisecond)
		nodes = append(nodes, h.StartNode(id, t.TempDir(), onceflighttest.NodeOptions{Tune: netTune,
			KafkaOpts: append([]kgo.Opt{kgo.Dialer(fn.Dial)}, kafkatest.ShortHeartbeats...)}))
	}
	a, b := nodes[0], nodes[1]
	onceflighttest.WaitFor(t, 60*time.Second, "A and B to share the partitions", func() bool { return shared(a, b) })
	onceflighttest.WaitFor(t, 30*time.Second, "the group to settle", func() bool {
		j := joins()
		time.Sleep(500 * time.Millisecond)
		return joins() == j
	})
	j0, a0 := joins(), assignment(h, a, b)
	t.Logf("%s: group formed and settled under latency", time.Since(start).Round(time.Millisecond))
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		h.Submit(id, fmt.Sprintf("order-%d", i%10), "k-"+id, `{}`)
		if i%10 == 9 { // a repeat, answered from the record
			rid := fmt.Sprintf("r%d", i)
			ids = append(ids, rid)
			h.Submit(rid, fmt.Sprintf("order-%d", i%10), "k-"+id, `{}`)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: submitted", time.Since(start).Round(time.Millisecond))
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(len(ids), seen, nil)
	t.Logf("%s: answered", time.Since(start).Round(time.Millisecond))
	if j, as := joins(), assignment(h, a, b); j != j0 || as != a0 {
		t.Errorf("under latency: %d JoinGroups (want none), assignment %s, was %s", j-j0, as, a0)
	}
	stopAndCheck(t, h, nodes, ids, func(id string) string {
		if id[0] == 'c' { // not the repeats: their keys are the originals'
			return "k-" + id
		}
		return ""
	})
	t.Logf("%s: stopped and checked", time.Since(start).Round(time.Millisecond))
}

// stopAndCheck stops nodes, then checks that every command in ids has one
// outcome id and succeeded, that the noop key of each (key(id), "" for
// none) took effect exactly once, and that the audit passes.
func stopAndCheck(t testing.TB, h *onceflighttest.Harness, nodes []*onceflighttest.Node, ids []string, key func(string) string) {
	t.Helper()
	for _, n := range nodes {
		if err := n.Stop(); err != nil {
			t.Errorf("%s: %v", n.ID, err)
		}
	}
	all := h.AllOutcomes()
	kafkatest.OneOutcomeEach(t, all, ids)
	effects := h.EffectCount()
	for _, id := range ids {
		if s := all[id][0].Record.Status; s != schemas.StatusSucceeded {
			t.Errorf("%s: %s %s", id, s, code(all[id][0]))
		}
		if k := key(id); k != "" && effects[k] != 1 {
			t.Errorf("%s took effect %d times, want 1", k, effects[k])
		}
	}
	h.Audit()
}

// startPair runs executor A, its connections through fn, and B, both
// tuned by tune, and waits until they share the partitions.
func startPair(t testing.TB, h *onceflighttest.Harness, fn *faultnet.Net, tune func(*consumer.Config)) (a, b *onceflighttest.Node) {
	t.Helper()
	a = h.StartNode("A", t.TempDir(), onceflighttest.NodeOptions{Tune: tune,
		KafkaOpts: append([]kgo.Opt{kgo.Dialer(fn.Dial)}, kafkatest.ShortHeartbeats...)})
	b = h.StartNode("B", t.TempDir(), onceflighttest.NodeOptions{Tune: tune, KafkaOpts: kafkatest.ShortHeartbeats})
	onceflighttest.WaitFor(t, 60*time.Second, "A and B to share the partitions", func() bool { return shared(a, b) })
	return a, b
}

// shared reports whether a and b are ready and own the three partitions
// between them, a at least one.
func shared(a, b *onceflighttest.Node) bool {
	return a.Ex.Ready() && b.Ex.Ready() && len(a.Ex.Owned())+len(b.Ex.Owned()) == 3 && len(a.Ex.Owned()) > 0
}

// batch submits n noop commands tagged tag over six entities (ids tag0..,
// keys k-<id>) and returns ids with theirs appended.
func batch(t testing.TB, h *onceflighttest.Harness, ids []string, tag string, n int) []string {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s%d", tag, i)
		ids = append(ids, id)
		h.Submit(id, fmt.Sprintf("order-%d", i%6), "k-"+id, `{}`)
	}
	return ids
}

// newClusterHarness is newHarness with the broker at hand (for controls).
func newClusterHarness(t *testing.T) (*onceflighttest.Harness, *kfake.Cluster) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs())), c
}
