package e2e

import (
	"os"
	"testing"
	"time"
)

// gatedPace is the pace of the streams whose faults land at given counts.
const gatedPace = 15 * time.Millisecond

// TestKillNineMidStream kills the executor with SIGKILL twice while commands
// stream in, the second time also deleting its local state, and checks that
// every command got one outcome and no key was executed twice.
func TestKillNineMidStream(t *testing.T) {
	brokers := startBroker(t)
	cfg, effects := noopConfig(t)
	opts := serveOpts{brokers: brokers, config: cfg, dataDir: t.TempDir(), executorID: "ex-kill9"}
	serve := startServe(t, opts)

	const total = 600
	cmds := planStream("k9", total, 50)
	prod := startProducer(t, brokers, fromList(cmds), gatedPace, 200)

	// First kill, about a quarter into the stream.
	prod.wait(150)
	t.Logf("SIGKILL after %d commands produced", prod.sent.Load())
	serve.kill()
	serve = startServe(t, opts)

	// Second kill, with the local state deleted: it must be restored
	// from the journal.
	n := prod.sent.Load()
	prod.allow(n + 200)
	prod.wait(n + 80)
	t.Logf("SIGKILL after %d commands produced; removing the data dir", prod.sent.Load())
	serve.kill()
	if err := os.RemoveAll(opts.dataDir); err != nil {
		t.Fatal(err)
	}
	noWait := opts
	noWait.noWait = true
	serve = startServe(t, noWait)
	prod.finish(false)
	t.Logf("all %d commands produced", total)

	start := time.Now()
	outs := waitOutcomes(t, fromKafka(brokers), commandIDs(cmds), nil, 90*time.Second)
	t.Logf("all outcomes present %s after the last command", time.Since(start).Round(time.Millisecond))
	checkStream(t, cmds, outs, effects, true)
	audit(t, brokers, defaultGroup)
	if serve.exited() {
		t.Errorf("serve exited: %v", serve.err)
	}
}

// TestGracefulShutdown stops the executor with SIGTERM mid-stream: it must
// exit 0 within 15s, and after a restart every command has exactly one
// outcome and no key was executed twice.
func TestGracefulShutdown(t *testing.T) {
	brokers := startBroker(t)
	cfg, effects := noopConfig(t)
	opts := serveOpts{brokers: brokers, config: cfg, dataDir: t.TempDir(), executorID: "ex-term"}
	serve := startServe(t, opts)

	const total = 300
	cmds := planStream("gs", total, 30)
	prod := startProducer(t, brokers, fromList(cmds), gatedPace, 180)
	prod.wait(120)

	t.Logf("SIGTERM after %d commands produced", prod.sent.Load())
	serve.term(15 * time.Second)

	opts.noWait = true
	startServe(t, opts)
	prod.finish(false)
	outs := waitOutcomes(t, fromKafka(brokers), commandIDs(cmds), nil, 90*time.Second)
	checkStream(t, cmds, outs, effects, false)
}
