package e2e

import (
	"testing"
	"time"
)

// TestBrokerRestart stops the broker mid-stream and starts it again on the
// same port and data dir. The executor and the producer reconnect; every
// command ends with one outcome id, no key is executed twice, and
// `onceflight audit` finds every guarantee held in the records.
//
// The restart is a SIGTERM, not a SIGKILL: after a SIGKILL the embedded
// development broker (kfake) can restart with one partition of a
// transaction visible and another not (seen here: an outcome event without
// its journal record), which no executor can repair. Production brokers
// (Kafka, Redpanda) recover transactions from their logs.
func TestBrokerRestart(t *testing.T) {
	addr := freePort(t)
	dir := t.TempDir()
	broker := startBrokerAt(t, addr, dir)
	cfg, effects := noopConfig(t)
	serve := startServe(t, serveOpts{brokers: addr, config: cfg, executorID: "ex-brk"})

	const total = 400
	cmds := planStream("br", total, 40)
	prod := startProducer(t, addr, fromList(cmds), gatedPace, 150)
	prod.wait(150)
	t.Logf("restarting the broker (SIGTERM) after %d commands produced", prod.sent.Load())
	broker.stop(10 * time.Second)
	time.Sleep(time.Second)
	startBrokerAt(t, addr, dir)
	t.Logf("broker restarted")
	prod.finish(false)

	outs := waitOutcomes(t, fromKafka(addr), commandIDs(cmds), nil, 120*time.Second)
	checkStream(t, cmds, outs, effects, true)
	audit(t, addr, defaultGroup)
	if serve.exited() {
		t.Errorf("serve exited: %v\n%s", serve.err, serve.tail(30))
	}
}
