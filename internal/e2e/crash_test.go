package e2e

import (
	"os"
	"testing"
	"time"
)

// TestKillNineMidStream kills the executor with SIGKILL twice while commands
// stream in, the second time also deleting its local state, and checks that
// every command got one outcome and no key was executed twice.
func TestKillNineMidStream(t *testing.T) {
	r := startNoopRun(t, startBroker(t), "ex-kill9", "k9", 600, 50, 200)

	// First kill, about a quarter into the stream.
	r.prod.wait(150)
	t.Logf("SIGKILL after %d commands produced", r.prod.sent.Load())
	r.serve.Kill()
	r.restart(false)

	// Second kill, with the local state deleted: it must be restored
	// from the journal.
	n := r.prod.sent.Load()
	r.prod.allow(n + 200)
	r.prod.wait(n + 80)
	t.Logf("SIGKILL after %d commands produced; removing the data dir", r.prod.sent.Load())
	r.serve.Kill()
	if err := os.RemoveAll(r.opts.dataDir); err != nil {
		t.Fatal(err)
	}
	r.restart(true)
	r.finish(90*time.Second, true)
}

// TestGracefulShutdown stops the executor with SIGTERM mid-stream: it must
// exit 0 within 15s, and after a restart every command has exactly one
// outcome and no key was executed twice.
func TestGracefulShutdown(t *testing.T) {
	r := startNoopRun(t, startBroker(t), "ex-term", "gs", 300, 30, 180)
	r.prod.wait(120)
	t.Logf("SIGTERM after %d commands produced", r.prod.sent.Load())
	r.serve.term(15 * time.Second)
	r.restart(true)
	r.finish(90*time.Second, false)
}

// TestKillNineWithIntentInFlight: one executor, killed with SIGKILL while
// calls are in flight at the service — their intents committed, in the
// journal only (an intent stays out of Pebble until its key's next record
// replaces it, DESIGN.md) — and restarted on the same data dir. Its
// restore must find those intents (the stored Progress is held before
// them) and inherit them (deadline, then confirmation): every key has one
// effect, and the audit passes. With the Progress stored past them
// (mutant intent-held-progress), the restart finds no record of such a
// key and executes it again, if a later transaction of its partition
// stored Progress before the kill: 2 runs of 3 failed (2026-12-06).
func TestKillNineWithIntentInFlight(t *testing.T) {
	c := newChaosCluster(t, 1, chaosSession)
	prod := c.startProducer("ki", 30, 2)
	ex := c.execs[0]
	for range 2 {
		time.Sleep(2 * time.Second)
		c.killInFlight(ex)
		c.start(ex)
	}
	time.Sleep(2 * time.Second)
	c.finish(prod, false)
}
