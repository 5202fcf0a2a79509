package consumer_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/faultnet"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// soakSample is one line of the soak's per-minute report.
type soakSample struct {
	at                time.Duration
	commands          int
	rssKiB, heapMiB   int64
	goroutines, files int
}

func (s soakSample) String() string {
	return fmt.Sprintf("%7s commands %6d  rss %4d MiB  goroutines %5d  open files %4d  heap %4d MiB",
		s.at.Round(time.Second), s.commands, s.rssKiB>>10, s.goroutines, s.files, s.heapMiB)
}

func sampleProcess(at time.Duration, commands int) soakSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := soakSample{at: at, commands: commands, goroutines: runtime.NumGoroutine(), heapMiB: int64(ms.HeapAlloc >> 20)}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				s.rssKiB, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	if es, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.files = len(es)
	}
	return s
}

// soakLeaks compares the steady level of the last samples (the least of
// them: a fault's reconnections come and go) with the level after warm-up.
// The margins are generous: this finds what keeps growing, not noise.
func soakLeaks(samples []soakSample, warm time.Duration) []string {
	i := slices.IndexFunc(samples, func(s soakSample) bool { return s.at >= warm })
	if i < 0 || len(samples)-i < 3 {
		return nil // too short a run to tell
	}
	base, tail := samples[i], samples[i+1:]
	tail = tail[max(0, len(tail)-max(2, len(tail)/4)):]
	g, f := tail[0].goroutines, tail[0].files
	for _, s := range tail {
		g, f = min(g, s.goroutines), min(f, s.files)
	}
	var out []string
	if g > base.goroutines*3/2+100 {
		out = append(out, fmt.Sprintf("goroutines grew from %d after warm-up to at least %d in the last %d samples", base.goroutines, g, len(tail)))
	}
	if f > base.files*3/2+50 {
		out = append(out, fmt.Sprintf("open files grew from %d after warm-up to at least %d in the last %d samples", base.files, f, len(tail)))
	}
	return out
}

func TestSoakLeakCheck(t *testing.T) {
	s := func(m, g, f int) soakSample {
		return soakSample{at: time.Duration(m) * time.Minute, goroutines: g, files: f}
	}
	flat := []soakSample{s(0, 50, 10), s(1, 400, 40), s(2, 900, 45), s(3, 420, 41), s(4, 410, 40), s(5, 430, 42)}
	if l := soakLeaks(flat, time.Minute); l != nil {
		t.Errorf("a flat run with one spike reported %v", l)
	}
	growing := []soakSample{s(0, 50, 10), s(1, 400, 40), s(2, 600, 70), s(3, 800, 100), s(4, 1000, 130), s(5, 1200, 160)}
	if l := soakLeaks(growing, time.Minute); len(l) != 2 {
		t.Errorf("a growing run reported %v, want goroutines and files", l)
	}
}

// soakEnv is a duration from the environment, or def.
func soakEnv(t *testing.T, name string, def time.Duration) time.Duration {
	if s := os.Getenv(name); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return d
	}
	return def
}

// TestSoak (make soak [DURATION=30m]; skipped unless ONCEFLIGHT_SOAK=1)
// runs three executors for SOAK_DURATION (default 10m) under a steady
// mixed load: new keys, repeats of answered keys, keys reused with other
// data (rejected idempotency_key_reused), business duplicates of a
// unique_by action (rejected duplicate_business_key), and an http action
// against a non-idempotent service that is sometimes slow past the attempt
// timeout, sometimes answers 500 after applying and sometimes 503 without.
// Every SOAK_FAULT_EVERY (default a tenth of the run, 20s to 3m) a fault
// in rotation: A's network stalled, cut or blackholed one way, A paused
// past its session, B restarted on an empty data dir, C restarted, the
// broker refusing offset commits or EndTxn; the broker itself restarts
// once, half way (kfake on the same port and data dir). RSS, goroutines,
// open files and heap are printed every minute. At the end every command
// has one outcome id with the status its kind calls for, every key took
// effect once (none for rejected ones), the audit passes, and goroutines
// and open files must not have kept growing after the warm-up.
func TestSoak(t *testing.T) {
	if os.Getenv("ONCEFLIGHT_SOAK") == "" {
		t.Skip("set ONCEFLIGHT_SOAK=1 (make soak)")
	}
	dur := soakEnv(t, "SOAK_DURATION", 10*time.Minute)
	every := soakEnv(t, "SOAK_FAULT_EVERY", min(max(dur/10, 20*time.Second), 3*time.Minute))
	warm := max(time.Minute, dur/5)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	brokerDir := t.TempDir()
	startBroker := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(brokerDir),
			kfake.GroupMinSessionTimeout(time.Second))
		if err != nil {
			t.Fatalf("broker: %v", err)
		}
		return c
	}
	c := startBroker()
	t.Cleanup(func() { c.Close() })
	h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
	svc := newEffectService(t, 5*time.Millisecond, func(key string, n int) apifake.Fault {
		if n > 1 {
			return apifake.None
		}
		i, _ := strconv.Atoi(key[strings.LastIndexByte(key, '-')+1:])
		switch {
		case i%7 == 3:
			return apifake.HangAfterEffect
		case i%5 == 1:
			return apifake.Fault{Status: http.StatusInternalServerError}
		case i%11 == 2:
			return apifake.Fault{Before: true, Status: http.StatusServiceUnavailable}
		}
		return apifake.None
	})
	h.UseConfig(effectsYAML(svc, "1s") + fmt.Sprintf(`  noop.ping:
    connector: noop
    effects_file: %[1]s
    timeout: 3s
  pay.unique:
    connector: noop
    effects_file: %[1]s
    timeout: 3s
    unique_by: [order_id]
`, h.Effects))

	tune := func(c *consumer.Config) {
		c.SessionTimeout = 3 * time.Second
		c.RevokeTimeout = 500 * time.Millisecond
		c.TransactionTimeout = 5 * time.Second
	}
	fn := faultnet.New()
	aOpts := onceflighttest.NodeOptions{Tune: tune, KafkaOpts: append([]kgo.Opt{kgo.Dialer(fn.Dial)}, kafkatest.ShortHeartbeats...)}
	plain := onceflighttest.NodeOptions{Tune: tune, KafkaOpts: kafkatest.ShortHeartbeats}
	cDir := t.TempDir()
	nodes := map[string]*onceflighttest.Node{
		"A": h.StartNode("A", t.TempDir(), aOpts),
		"B": h.StartNode("B", t.TempDir(), plain),
		"C": h.StartNode("C", cDir, plain),
	}
	faults := []struct {
		name string
		do   func()
	}{
		{"stall A 1s", func() { fn.Stall(); time.Sleep(time.Second); fn.Resume() }},
		{"restart B on an empty data dir", func() {
			_ = nodes["B"].Stop()
			nodes["B"] = h.StartNode("B", t.TempDir(), plain)
		}},
		{"cut A 5s", func() { fn.Cut(); time.Sleep(5 * time.Second); fn.Resume() }},
		{"TxnOffsetCommit ILLEGAL_GENERATION x3", func() {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.IllegalGeneration, Count: 3})
		}},
		{"pause A 5s (past its session)", func() { fn.Stall(); time.Sleep(5 * time.Second); fn.Resume() }},
		{"restart C on its data dir", func() {
			_ = nodes["C"].Stop()
			nodes["C"] = h.StartNode("C", cDir, plain)
		}},
		{"blackhole A out 5s", func() { fn.Blackhole(faultnet.Out); time.Sleep(5 * time.Second); fn.Resume() }},
		{"EndTxn UNKNOWN_SERVER_ERROR x1", func() {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true, Err: kerr.UnknownServerError, Count: 1})
		}},
		{"blackhole A in 5s", func() { fn.Blackhole(faultnet.In); time.Sleep(5 * time.Second); fn.Resume() }},
	}

	type expect struct {
		status schemas.Status
		code   string
		of     string // a repeat: the command whose outcome it repeats
	}
	var ids []string
	want := map[string]expect{}  // command id -> what its outcome must be
	effects := map[string]int{}  // noop key -> effects
	httpKeys := map[string]int{} // http key -> effects
	submit := func(id, action, entity, key, data string, e expect) {
		ids = append(ids, id)
		want[id] = e
		h.SubmitAction(id, action, entity, key, data)
	}
	start := time.Now()
	var samples []soakSample
	report := func() {
		s := sampleProcess(time.Since(start), len(ids))
		samples = append(samples, s)
		t.Log(s)
	}
	report()
	nextFault, nextReport, brokerAt := start.Add(every), start.Add(time.Minute), start.Add(dur/2)
	fi, restarted := 0, false
	for i := 0; time.Since(start) < dur; i++ {
		ent := fmt.Sprintf("order-%d", i%50)
		id := fmt.Sprintf("s-%d", i)
		submit(id, "noop.ping", ent, "k-"+id, `{"n":1}`, expect{status: schemas.StatusSucceeded})
		effects["k-"+id] = 1
		if i >= 10 {
			prev := i - 5
			pent, pid := fmt.Sprintf("order-%d", prev%50), fmt.Sprintf("s-%d", prev)
			switch i % 10 {
			case 1: // a repeat of an earlier key, same data
				submit(fmt.Sprintf("r-%d", i), "noop.ping", pent, "k-"+pid, `{"n":1}`, expect{of: pid})
			case 4: // the same key with other data
				submit(fmt.Sprintf("x-%d", i), "noop.ping", pent, "k-"+pid, `{"n":2}`,
					expect{status: schemas.StatusRejected, code: schemas.CodeKeyReused})
			case 7: // a business duplicate: another key, the same order
				submit(fmt.Sprintf("d-%d", i), "pay.unique", pent, fmt.Sprintf("ud-%d", prev),
					fmt.Sprintf(`{"order_id":"o-%d","again":true}`, prev),
					expect{status: schemas.StatusRejected, code: schemas.CodeDuplicateBusinessKey})
				effects[fmt.Sprintf("ud-%d", prev)] = 0
			}
		}
		if i%10 == 2 { // the first of a business pair (its duplicate comes at i+5)
			submit(fmt.Sprintf("u-%d", i), "pay.unique", ent, fmt.Sprintf("u-%d", i),
				fmt.Sprintf(`{"order_id":"o-%d"}`, i), expect{status: schemas.StatusSucceeded})
			effects[fmt.Sprintf("u-%d", i)] = 1
		}
		if i%4 == 0 {
			hid := fmt.Sprintf("h-%d", i)
			submit(hid, "pay.call", ent, "hk-"+strconv.Itoa(i), `{"amount":1}`, expect{status: schemas.StatusSucceeded})
			httpKeys["hk-"+strconv.Itoa(i)] = 1
		}
		time.Sleep(20 * time.Millisecond)
		now := time.Now()
		if !restarted && now.After(brokerAt) {
			t.Logf("%s fault: broker restart (kfake closed, started again on port %d and its data dir)", now.Sub(start).Round(time.Second), port)
			c.Close()
			c = startBroker()
			restarted = true
			nextFault = time.Now().Add(every)
		} else if now.After(nextFault) {
			f := faults[fi%len(faults)]
			t.Logf("%s fault: %s", now.Sub(start).Round(time.Second), f.name)
			f.do()
			fi++
			nextFault = time.Now().Add(every)
		}
		if now.After(nextReport) {
			report()
			nextReport = nextReport.Add(time.Minute)
		}
	}
	t.Logf("%s load stopped: %d commands, %d faults, broker restarted %v", time.Since(start).Round(time.Second), len(ids), fi, restarted)

	// Every command answered: read the outcomes as they come.
	seen := map[string][]schemas.Outcome{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	for answered := 0; answered < len(ids); {
		fs := h.Client().PollFetches(ctx)
		if ctx.Err() != nil {
			cancel()
			var missing []string
			for _, id := range ids {
				if len(seen[id]) == 0 && len(missing) < 10 {
					missing = append(missing, id)
				}
			}
			t.Fatalf("%d of %d commands answered after the load; unanswered (first 10) %v", answered, len(ids), missing)
		}
		for _, r := range fs.Records() {
			if r.Topic != "onceflight.outcomes" {
				continue
			}
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				t.Fatalf("undecodable outcome: %v", err)
			}
			if len(seen[o.CausationID]) == 0 {
				if _, ok := want[o.CausationID]; ok {
					answered++
				}
			}
			seen[o.CausationID] = append(seen[o.CausationID], o)
		}
	}
	cancel()
	report()
	for _, name := range []string{"A", "B", "C"} {
		if err := nodes[name].Stop(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	all := h.AllOutcomes()
	kafkatest.OneOutcomeEach(t, all, ids)
	bad := 0
	for _, id := range ids {
		e, o := want[id], all[id][0]
		if e.of != "" { // a repeat: the same answer as the command it repeats
			first := all[e.of][0]
			e = expect{status: first.Record.Status, code: code(first)}
		}
		if o.Record.Status != e.status || code(o) != e.code {
			if bad++; bad <= 20 {
				t.Errorf("%s: %s %s, want %s %s", id, o.Record.Status, code(o), e.status, e.code)
			}
		}
	}
	got := h.EffectCount()
	for k, n := range effects {
		if got[k] != n {
			if bad++; bad <= 20 {
				t.Errorf("%s took effect %d times, want %d", k, got[k], n)
			}
		}
	}
	svc.Check(t, httpKeys)
	t.Logf("%d commands, %d faults, %d http keys (%d POSTs); audit:", len(ids), fi, len(httpKeys), svc.Posts())
	h.Audit()
	for _, l := range soakLeaks(samples, warm) {
		t.Error(l)
	}
}
