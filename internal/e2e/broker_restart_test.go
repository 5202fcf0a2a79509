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
	addr, dir := freePort(t), t.TempDir()
	broker := startBrokerAt(t, addr, dir)
	r := startNoopRun(t, addr, "ex-brk", "br", 400, 40, 150)
	r.prod.wait(150)
	t.Logf("restarting the broker (SIGTERM) after %d commands produced", r.prod.sent.Load())
	_ = broker.Stop(10 * time.Second)
	time.Sleep(time.Second)
	startBrokerAt(t, addr, dir)
	t.Logf("broker restarted")
	r.finish(120*time.Second, true)
}
