package consumer_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/faultnet"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// The simulation of the whole executor (issue 19, item 3; in the spirit of
// FoundationDB's simulation and TigerBeetle's VOPR). A seed generates a
// history — a list of steps, fixed before anything runs — of commands over
// three entities (two on partition 0, one elsewhere) and a few keys each,
// the scripted answers of the external system for each key, operator
// decisions (some forged), reconcile requests, and faults: executor
// restarts on the same data dir and on an empty one, a second executor
// joining the group (a rebalance) and one leaving it (a takeover), an
// executor whose Kafka connections stall past its session (a zombie),
// broker errors and broker restarts, and a slow command of a third entity
// of partition 0 that holds its committed offset, so that a restart
// consumes answered commands again. The history
// runs against real executors on kfake and a real HTTP service on
// loopback (simService); then the model checks G1–G5 from what the
// service saw and what the executors published (simCheck).

// simWorld is where histories happen: ents[0] and ents[1] share partition
// 0 with slowEnt, the slow command's entity; ents[2] is on another
// partition.
type simWorld struct {
	ents    []string
	slowEnt string
}

func newSimWorld() simWorld {
	same, other := entitiesOn(0, 3)
	return simWorld{ents: []string{same[0], same[1], other}, slowEnt: same[2]}
}

// The simulation's actions. Every one but slow.call goes to simService.
var simActions = []string{"pay.confirm", "pay.blind", "pay.unique", "pay.hold"}

const simYAML = `reconcile:
  every: 500ms
actions:
  slow.call:
    connector: http
    url: %[1]s/slow
    timeout: 8s
    idempotent_by_key: true
  pay.confirm:
    connector: http
    url: %[2]s/pay
    confirm_url: %[2]s/pay/{key}
    timeout: 300ms
    confirm_timeout: 800ms
  pay.blind:
    connector: http
    url: %[2]s/blind
    timeout: 300ms
  pay.unique:
    connector: http
    url: %[2]s/unique
    confirm_url: %[2]s/unique/{key}
    timeout: 300ms
    confirm_timeout: 800ms
    unique_by: [order]
  pay.hold:
    connector: http
    url: %[2]s/hold
    confirm_url: %[2]s/hold/{key}
    timeout: 300ms
    confirm_timeout: 800ms
    unique_by: [order]
    on_duplicate: hold
`

// Step kinds.
const (
	opSubmit    = "submit"
	opDecide    = "decide"    // a signed operator decision
	opForge     = "forge"     // a forged one: must be refused and change nothing
	opReconcile = "reconcile" // an operator's reconcile request (unsigned)
	opRestart   = "restart"
	opJoin      = "join"  // the other executor joins the group: a rebalance
	opLeave     = "leave" // one of two executors stops: a takeover
	opHold      = "hold"  // a slow command holds partition 0's committed offset
	opWait      = "wait"  // wait until every command so far is answered
	opPause     = "pause" // an executor's Kafka connections stall past its session: a zombie
	opBroker    = "broker-restart"
	opBrokerErr = "broker-errors" // the broker answers some requests with errors
)

// simBrokerFaults are the broker errors a history injects (kfake faults:
// the broker answers the next Count such requests with Err).
var simBrokerFaults = []struct {
	name  string
	fault kfake.Fault
}{
	{"EndTxn UNKNOWN_SERVER_ERROR x1", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true, Err: kerr.UnknownServerError, Count: 1}},
	{"TxnOffsetCommit ILLEGAL_GENERATION x2", kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.IllegalGeneration, Count: 2}},
	{"Produce journal TRANSACTION_ABORTABLE x1", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.journal", Err: kerr.TransactionAbortable, Count: 1}},
	{"Produce outcomes NOT_LEADER_OR_FOLLOWER x1", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "onceflight.outcomes", Err: kerr.NotLeaderForPartition, Count: 1}},
}

// simStep is one step of a history.
type simStep struct {
	N      int
	Op     string
	ID     string
	Action string // submit; decision type for decide/forge
	Entity string
	Key    string
	Data   string
	// Expected is the command's expectedversion, if any.
	Expected *int64
	As       string // resolve's verdict
	Forgery  string // forge: "unsigned", "unknown key", "bad signature"
	Node     string // restart, join, leave
	Empty    bool   // restart on an empty data dir
	Fault    int    // broker-errors: index in simBrokerFaults
}

func (s simStep) String() string {
	b := fmt.Sprintf("%2d %s", s.N, s.Op)
	switch s.Op {
	case opSubmit:
		b += fmt.Sprintf(" %s %s %s/%s %s", s.ID, s.Action, s.Entity, s.Key, s.Data)
		if s.Expected != nil {
			b += fmt.Sprintf(" expectedversion=%d", *s.Expected)
		}
	case opDecide, opForge:
		b += fmt.Sprintf(" %s %s %s/%s", s.ID, s.Action, s.Entity, s.Key)
		if s.As != "" {
			b += " as " + s.As
		}
		if s.Forgery != "" {
			b += " (" + s.Forgery + ")"
		}
	case opReconcile:
		b += fmt.Sprintf(" %s %s/%s", s.ID, s.Entity, s.Key)
	case opRestart:
		where := "same data dir"
		if s.Empty {
			where = "empty data dir"
		}
		b += fmt.Sprintf(" executor %s on %s", s.Node, where)
	case opJoin, opLeave:
		b += " executor " + s.Node
	case opPause:
		b += fmt.Sprintf(" executor %s for %s (its session is %s)", s.Node, simPause, simSession)
	case opHold:
		b += fmt.Sprintf(" %s slow.call %s/%s", s.ID, s.Entity, s.Key)
	case opBrokerErr:
		b += ": " + simBrokerFaults[s.Fault].name
	}
	return b
}

// simHistory is a generated history: its steps and the external system's
// script of every key.
type simHistory struct {
	seed    uint64
	steps   []simStep
	scripts map[string]keyScript
}

// simLength is the number of steps of a history.
const simLength = 36

// generate builds the history of seed. It is a pure function of the seed:
// replaying a seed replays the same steps (the executors' timing is not
// replayed; a failure that depends on it shows up as a flaky seed).
func generate(seed uint64, w simWorld) simHistory {
	rng := rand.New(rand.NewPCG(seed, 19))
	h := simHistory{seed: seed, scripts: map[string]keyScript{}}
	postKinds := []string{postOK, postOK, postOK, post4xx, post5xxBefore, post5xxAfter, postTimeoutBefore, postTimeoutAfter, post503}
	keysOf := map[string][]string{}
	home := map[string]string{} // a key's usual action
	for _, e := range w.ents {
		for j := range 3 {
			k := fmt.Sprintf("%s-k%d", e, j)
			keysOf[e] = append(keysOf[e], k)
			home[k] = simActions[rng.IntN(len(simActions))]
			var sc keyScript
			for range 1 + rng.IntN(2) {
				sc.posts = append(sc.posts, postKinds[rng.IntN(len(postKinds))])
			}
			switch rng.IntN(6) {
			case 0, 1:
				// Past confirm_timeout (800ms): unresolved, then the
				// reconciler (every 500ms) finds the truth.
				sc.unknown = 1500 * time.Millisecond
			case 2:
				sc.unknown = confirmForever
			}
			h.scripts[k] = sc
		}
	}
	running := []string{"a"}
	// Faults: about one step in seven, spread over the history.
	holds := 0
	for i := range simLength {
		st := simStep{N: i}
		e := w.ents[rng.IntN(len(w.ents))]
		k := keysOf[e][rng.IntN(len(keysOf[e]))]
		r := rng.IntN(100)
		// Every history restarts an executor on its data dir (in its
		// first half) and on an empty one (in its second half), unless it
		// did already.
		restarted := func(empty bool, from int) bool {
			return slices.ContainsFunc(h.steps, func(s simStep) bool { return s.Op == opRestart && s.Empty == empty && s.N >= from })
		}
		switch {
		case i == simLength/3 && !restarted(false, 0):
			st.Op, st.Node = opRestart, running[rng.IntN(len(running))]
		case i == simLength*2/3 && !restarted(true, simLength/2):
			st.Op, st.Node, st.Empty = opRestart, running[rng.IntN(len(running))], true
		case i == 0 || (r < 4 && holds < 4):
			st.Op, st.ID, st.Entity, st.Key = opHold, fmt.Sprintf("slow%d", holds), w.slowEnt, fmt.Sprintf("kx%d", holds)
			holds++
		case r < 55:
			st.Op, st.ID, st.Entity, st.Key = opSubmit, fmt.Sprintf("c%d", i), e, k
			st.Action = home[k]
			if rng.IntN(8) == 0 {
				st.Action = simActions[rng.IntN(len(simActions))] // reuse with another action: key_reused
			}
			fields := fmt.Sprintf(`"v":%d`, rng.IntN(2))
			if st.Action == "pay.unique" || st.Action == "pay.hold" {
				fields = fmt.Sprintf(`"order":"o%d",%s`, rng.IntN(2), fields)
			}
			st.Data = "{" + fields + "}"
			if rng.IntN(6) == 0 {
				v := int64(rng.IntN(3))
				st.Expected = &v
			}
		case r < 72:
			st.Op, st.ID, st.Entity, st.Key = opDecide, fmt.Sprintf("d%d", i), e, k
			st.Action = []string{schemas.TypeRelease, schemas.TypeRelease, schemas.TypeResolve, schemas.TypeApprove}[rng.IntN(4)]
			if st.Action == schemas.TypeResolve {
				st.As = []string{"succeeded", "failed", "rejected"}[rng.IntN(3)]
			}
		case r < 78:
			st.Op, st.ID, st.Entity, st.Key = opForge, fmt.Sprintf("f%d", i), e, k
			st.Action = []string{schemas.TypeRelease, schemas.TypeResolve, schemas.TypeApprove}[rng.IntN(3)]
			if st.Action == schemas.TypeResolve {
				st.As = "succeeded"
			}
			st.Forgery = []string{"unsigned", "unknown key", "bad signature"}[rng.IntN(3)]
		case r < 83:
			st.Op, st.ID, st.Entity, st.Key = opReconcile, fmt.Sprintf("r%d", i), e, k
		case r < 86:
			st.Op = opWait
		case r < 88:
			st.Op = opBroker
		case r < 90:
			st.Op, st.Node = opPause, running[rng.IntN(len(running))]
		case r < 93:
			st.Op, st.Fault = opBrokerErr, rng.IntN(len(simBrokerFaults))
		default:
			switch {
			case len(running) == 1 && rng.IntN(3) == 0:
				other := "b"
				if running[0] == "b" {
					other = "a"
				}
				st.Op, st.Node = opJoin, other
				running = append(running, other)
			case len(running) == 2 && rng.IntN(2) == 0:
				j := rng.IntN(2)
				st.Op, st.Node = opLeave, running[j]
				running = slices.Delete(running, j, j+1)
			default:
				st.Op, st.Node, st.Empty = opRestart, running[rng.IntN(len(running))], rng.IntN(2) == 0
			}
		}
		h.steps = append(h.steps, st)
	}
	return h
}

// faultKinds counts a history's faults and inputs by kind, for the
// report of `make sim`.
func (h simHistory) faultKinds() map[string]int {
	n := map[string]int{}
	for _, s := range h.steps {
		switch s.Op {
		case opSubmit:
			n["command "+s.Action]++
			if s.Expected != nil {
				n["expectedversion"]++
			}
		case opDecide:
			n["decision "+s.Action]++
		case opForge:
			n["forged "+s.Forgery]++
		case opRestart:
			if s.Empty {
				n["restart on an empty data dir"]++
			} else {
				n["restart on the same data dir"]++
			}
		case opBrokerErr:
			n["broker "+simBrokerFaults[s.Fault].name]++
		case opPause:
			n["pause past the session (zombie)"]++
		case opJoin:
			n["rebalance (join)"]++
		case opLeave:
			n["takeover (leave)"]++
		default:
			n[s.Op]++
		}
	}
	seen := map[string]bool{}
	for _, s := range h.steps {
		if s.Op == opSubmit && !seen[s.Key] {
			seen[s.Key] = true
			for _, p := range h.scripts[s.Key].posts {
				n["answer "+p]++
			}
			switch u := h.scripts[s.Key].unknown; u {
			case 0:
			case confirmForever:
				n["confirm unknown forever"]++
			default:
				n["confirm unknown then truth"]++
			}
		}
	}
	return n
}

// simRun is a history running: the harness, the service, the executors.
type simRun struct {
	t *testing.T
	h *onceflighttest.Harness
	// broker is the kfake cluster, restarted on its port and data dir.
	broker      *kfake.Cluster
	startBroker func() *kfake.Cluster
	svc         *simService
	ks          *schemas.ControlKeys
	nodes       map[string]*onceflighttest.Node
	nets        map[string]*faultnet.Net // each executor's Kafka connections
	dirs        map[string]string
	// ids are the commands that must be answered, in order of submission.
	ids  []string
	seen map[string][]schemas.Outcome
}

// simSession is the executors' session timeout, simPause how long opPause
// stalls an executor's Kafka connections: past its session, so the group
// gives its partitions to the other executor while it believes it still
// owns them.
const (
	simSession = 3 * time.Second
	simPause   = 4 * time.Second
)

func (r *simRun) start(id string) {
	fn := faultnet.New()
	r.nets[id] = fn
	r.nodes[id] = r.h.StartNode(id, r.dirs[id], onceflighttest.NodeOptions{
		Tune: func(c *consumer.Config) {
			c.ControlKeys = r.ks
			// A graceful stop gives up on a request in flight soon and
			// leaves it in progress for the next owner.
			c.RevokeTimeout = 100 * time.Millisecond
			c.SessionTimeout = simSession
			c.TransactionTimeout = 5 * time.Second
		},
		KafkaOpts: append([]kgo.Opt{kgo.Dialer(fn.Dial)}, kafkatest.ShortHeartbeats...),
	})
}

func (r *simRun) stop(id string) {
	if err := r.nodes[id].Stop(); err != nil {
		r.t.Errorf("executor %s: run: %v", id, err)
	}
	delete(r.nodes, id)
}

func (r *simRun) produce(c schemas.Command) {
	rec, err := schemas.EncodeCommand(c, schemas.Binary)
	if err != nil {
		r.t.Fatal(err)
	}
	rec.Topic = "onceflight.commands"
	r.h.Produce(rec)
}

// waitAnswered reads outcomes until every command submitted so far has
// one.
func (r *simRun) waitAnswered() {
	until(r.h, r.seen, func() bool {
		for _, id := range r.ids {
			if len(r.seen[id]) == 0 {
				return false
			}
		}
		return true
	})
}

func (r *simRun) do(s simStep) {
	switch s.Op {
	case opSubmit, opHold:
		action := s.Action
		if s.Op == opHold {
			action, s.Data = "slow.call", `{}`
		}
		r.produce(schemas.Command{ID: s.ID, Source: "sim", Type: action, Subject: s.Entity, IdempotencyKey: s.Key,
			Data: json.RawMessage(s.Data), ExpectedVersion: s.Expected})
		r.ids = append(r.ids, s.ID)
	case opDecide, opForge:
		data, _ := json.Marshal(schemas.Decision{Key: s.Key, As: s.As, Reason: "sim " + s.ID, By: "sim"})
		c := schemas.Command{ID: s.ID, Source: "sim-operator", Type: s.Action, Subject: s.Entity, IdempotencyKey: s.Action + "/" + s.ID, Data: data}
		switch s.Forgery {
		case "":
			if err := r.ks.SignControl(&c); err != nil {
				r.t.Fatal(err)
			}
		case "unknown key":
			k, err := schemas.NewOperatorKey("intruder")
			if err != nil {
				r.t.Fatal(err)
			}
			if err := (&schemas.ControlKeys{Keys: []schemas.ControlKey{k}}).SignControl(&c); err != nil {
				r.t.Fatal(err)
			}
		case "bad signature":
			// Signed by the operator's key for another verdict: the
			// signature does not cover what is sent.
			if err := r.ks.SignControl(&c); err != nil {
				r.t.Fatal(err)
			}
			c.Data, _ = json.Marshal(schemas.Decision{Key: s.Key, As: s.As, Reason: "forged " + s.ID, By: "sim"})
		}
		r.produce(c)
		r.ids = append(r.ids, s.ID)
	case opReconcile:
		data, _ := json.Marshal(map[string]string{"key": s.Key})
		r.produce(schemas.Command{ID: s.ID, Source: "sim-operator", Type: schemas.TypeReconcile, Subject: s.Entity, IdempotencyKey: "reconcile/" + s.ID, Data: data})
	case opWait:
		r.waitAnswered()
	case opRestart:
		r.stop(s.Node)
		if s.Empty {
			r.dirs[s.Node] = r.t.TempDir()
		}
		r.start(s.Node)
	case opJoin:
		r.dirs[s.Node] = r.t.TempDir()
		r.start(s.Node)
	case opLeave:
		r.stop(s.Node)
	case opPause:
		r.nets[s.Node].Stall()
		time.Sleep(simPause)
		r.nets[s.Node].Resume()
	case opBroker:
		// Not while an executor starts: one that cannot reach the
		// brokers at start (creating its topics) ends Run with the error,
		// for its supervisor to restart it (serve exits 1).
		for id, n := range r.nodes {
			onceflighttest.WaitFor(r.t, 60*time.Second, "executor "+id+" ready before the broker restarts", n.Ex.Ready)
		}
		r.broker.Close()
		r.broker = r.startBroker()
	case opBrokerErr:
		r.broker.Fault(simBrokerFaults[s.Fault].fault)
	}
}

// simulate runs the history of seed, restricted to the steps in only
// (all when nil), and checks it.
func simulate(t *testing.T, seed uint64, only map[int]bool) (kinds map[string]int) {
	w := newSimWorld()
	hist := generate(seed, w)
	if only != nil {
		hist.steps = slices.DeleteFunc(hist.steps, func(s simStep) bool { return !only[s.N] })
	}
	// The broker listens on a port of its own and keeps its data in a
	// directory, so that it can be restarted (opBroker).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	brokerDir := t.TempDir()
	startBroker := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(brokerDir), kfake.GroupMinSessionTimeout(time.Second))
		if err != nil {
			t.Fatalf("broker: %v", err)
		}
		return c
	}
	broker := startBroker()
	h := onceflighttest.New(t, onceflighttest.OnBrokers(broker.ListenAddrs()))
	k, err := schemas.NewOperatorKey("ops-1")
	if err != nil {
		t.Fatal(err)
	}
	_, slowURL := newSlowService(t, "kx0", "kx1", "kx2", "kx3")
	svc := newSimService(t, hist.scripts)
	h.UseConfig(fmt.Sprintf(simYAML, slowURL, svc.srv.URL))
	r := &simRun{t: t, h: h, svc: svc, broker: broker, startBroker: startBroker, ks: &schemas.ControlKeys{Keys: []schemas.ControlKey{k}},
		nodes: map[string]*onceflighttest.Node{}, nets: map[string]*faultnet.Net{}, dirs: map[string]string{"a": t.TempDir()}, seen: map[string][]schemas.Outcome{}}
	// Closed after everything that uses it (cleanups run last in, first
	// out).
	t.Cleanup(func() { r.broker.Close() })
	defer func() {
		if t.Failed() {
			t.Logf("history of seed %d (replay: make sim SEED=%d):", seed, seed)
			for _, s := range hist.steps {
				t.Log("  " + s.String())
			}
		}
	}()
	r.start("a")
	for _, s := range hist.steps {
		r.do(s)
	}
	// Every command gets its answer; then the executors stop, so that
	// what they published and what the service saw are read complete.
	r.waitAnswered()
	for _, id := range slices.Sorted(maps.Keys(r.nodes)) {
		r.stop(id)
	}
	bad, seen := simCheck(t, h, r.ks, svc, hist, r.ids)
	if len(bad) > 0 {
		for _, b := range bad {
			t.Error(b.what)
		}
		reproduce(t, hist, bad)
	}
	kinds = hist.faultKinds()
	for k, n := range seen {
		kinds[k] += n
	}
	return kinds
}

// violation is what the model found wrong, and the keys (entity/key, or
// a command id) it is about.
type violation struct {
	what string
	keys []string
}

// reproduce prints the smaller step list the model points at: every step
// of the entities a violation names (an entity's earlier commands decide
// its version and its unique_by holders, so they stay), plus every fault
// and hold (a violation often needs the restart that consumed commands
// again), and how to replay just those steps.
func reproduce(t *testing.T, hist simHistory, bad []violation) {
	about := map[string]bool{}
	ents := map[string]bool{}
	byID := map[string]simStep{}
	for _, s := range hist.steps {
		byID[s.ID] = s
	}
	for _, b := range bad {
		for _, k := range b.keys {
			about[k] = true
			if s, ok := byID[k]; ok {
				ents[s.Entity] = true
			} else if i := strings.LastIndex(k, "-k"); i > 0 {
				ents[k[:i]] = true
			}
		}
	}
	var keep []simStep
	var ns []string
	for _, s := range hist.steps {
		switch s.Op {
		case opSubmit, opDecide, opForge, opReconcile:
			if !ents[s.Entity] {
				continue
			}
		}
		keep = append(keep, s)
		ns = append(ns, fmt.Sprint(s.N))
	}
	t.Logf("reproduction (the steps of entities %v, the faults and holds): make sim SEED=%d STEPS=%s", slices.Sorted(maps.Keys(ents)), hist.seed, strings.Join(ns, ","))
	for _, s := range keep {
		t.Log("  " + s.String())
	}
	for _, k := range slices.Sorted(maps.Keys(about)) {
		if sc, ok := hist.scripts[k]; ok {
			t.Logf("  script of %s: %s", k, sc)
		}
	}
}
