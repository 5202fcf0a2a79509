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
	cfg, effects := writeConfig(t)
	opts := serveOpts{brokers: addr, config: cfg, dataDir: t.TempDir(), executorID: "ex-brk"}
	serve := startServe(t, opts, true)

	const total = 400
	cmds := planStream("br", total, 40)
	prod := startProducer(t, addr, cmds, 150)
	prod.wait(t, 150)
	t.Logf("restarting the broker (SIGTERM) after %d commands produced", prod.sent.Load())
	broker.stop(10 * time.Second)
	time.Sleep(time.Second)
	startBrokerAt(t, addr, dir)
	t.Logf("broker restarted")
	prod.finish(t, total)

	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.id
	}
	outs := waitOutcomes(t, addr, ids, 120*time.Second)
	checkStream(t, cmds, outs, effects, true)
	audit(t, addr, "e2e")
	if serve.exited() {
		t.Errorf("serve exited: %v\n%s", serve.err, serve.tail(30))
	}
}
