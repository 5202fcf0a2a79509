package consumer_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/faultnet"
)

// TestSoak (make soak; skipped unless ONCEFLIGHT_SOAK=1) runs three
// executors under a steady mixed load — new keys, repeats of answered keys
// — for SOAK_DURATION (default 10m), with a fault every 20s in rotation:
// A's network stalled, A's network cut past the session, B restarted on an
// empty data dir, the broker refusing offset commits, the broker refusing
// EndTxn. Goroutines and heap are printed every minute; at the end every
// command has one outcome, every key took effect once and the audit passes.
func TestSoak(t *testing.T) {
	if os.Getenv("ONCEFLIGHT_SOAK") == "" {
		t.Skip("set ONCEFLIGHT_SOAK=1 (make soak)")
	}
	dur := 10 * time.Minute
	if s := os.Getenv("SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SOAK_DURATION: %v", err)
		}
		dur = d
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h := newHarnessOn(t, c.ListenAddrs())
	tune := func(c *consumer.Config) {
		c.SessionTimeout = 3 * time.Second
		c.RevokeTimeout = 500 * time.Millisecond
		c.TransactionTimeout = 5 * time.Second
	}
	fn := faultnet.New()
	nodes := map[string]*node{
		"A": h.startNode("A", t.TempDir(), nodeOpts{tune: tune, exOpts: append([]consumer.Option{consumer.WithKgoOpts(kgo.Dialer(fn.Dial))}, shortHeartbeats...)}),
		"B": h.startNode("B", t.TempDir(), nodeOpts{tune: tune, exOpts: shortHeartbeats}),
		"C": h.startNode("C", t.TempDir(), nodeOpts{tune: tune, exOpts: shortHeartbeats}),
	}
	faults := []struct {
		name string
		do   func()
	}{
		{"stall A 1s", func() { fn.Stall(); time.Sleep(time.Second); fn.Resume() }},
		{"cut A 5s", func() { fn.Cut(); time.Sleep(5 * time.Second); fn.Resume() }},
		{"restart B on an empty data dir", func() {
			_ = nodes["B"].stop()
			nodes["B"] = h.startNode("B", t.TempDir(), nodeOpts{tune: tune, exOpts: shortHeartbeats})
		}},
		{"TxnOffsetCommit ILLEGAL_GENERATION x3", func() {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.IllegalGeneration, Count: 3})
		}},
		{"EndTxn UNKNOWN_SERVER_ERROR x1", func() {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TopLevel: true, Err: kerr.UnknownServerError, Count: 1})
		}},
	}
	var ids []string
	repeats := map[string]string{} // repeat command id -> key
	start := time.Now()
	nextFault, nextReport, fi, i := start.Add(20*time.Second), start, 0, 0
	for time.Since(start) < dur {
		id := fmt.Sprintf("s%d", i)
		ids = append(ids, id)
		h.submit(id, fmt.Sprintf("order-%d", i%50), "k-"+id, `{}`)
		if i%10 == 9 { // a repeat of an earlier key, same data
			rid := fmt.Sprintf("r%d", i)
			k := fmt.Sprintf("k-s%d", i-5)
			ids = append(ids, rid)
			repeats[rid] = k
			h.submit(rid, fmt.Sprintf("order-%d", (i-5)%50), k, `{}`)
		}
		i++
		time.Sleep(20 * time.Millisecond)
		if now := time.Now(); now.After(nextFault) {
			f := faults[fi%len(faults)]
			t.Logf("%s fault: %s", now.Sub(start).Round(time.Second), f.name)
			f.do()
			fi++
			nextFault = time.Now().Add(20 * time.Second)
		}
		if now := time.Now(); now.After(nextReport) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			t.Logf("%s commands %d goroutines %d heap %d MiB", now.Sub(start).Round(time.Second), len(ids), runtime.NumGoroutine(), ms.HeapAlloc>>20)
			nextReport = now.Add(time.Minute)
		}
	}
	waitFor(t, 2*time.Minute, "every command answered", func() bool {
		total := 0
		for _, n := range nodes {
			if !n.ex.Ready() {
				return false
			}
		}
		for _, os := range h.allOutcomes() {
			total += min(len(os), 1)
		}
		return total >= len(ids)
	})
	for name, n := range nodes {
		if err := n.stop(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	all := h.allOutcomes()
	oneOutcomeEach(t, all, ids)
	effects := h.effectCount()
	for _, id := range ids {
		if _, ok := repeats[id]; ok {
			continue
		}
		if effects["k-"+id] != 1 {
			t.Errorf("k-%s took effect %d times, want 1", id, effects["k-"+id])
		}
	}
	t.Logf("%d commands, %d faults, audit:", len(ids), fi)
	h.audit()
}
