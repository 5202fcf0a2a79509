package consumer

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// contactHook records the group client's answered requests that show the
// executor is in touch with its group coordinator and its partitions'
// leaders: fetches and heartbeats, which go out even when no command
// arrives (a fetch long-polls, a heartbeat every few seconds), so an
// executor that still talks to the brokers always has a recent contact,
// and one that lost them has none after the session timeout, which is when
// the group gives its partitions away. The answers to SyncGroup (the
// assignment), Produce, TxnOffsetCommit and EndTxn (the journal, the
// answers and each restore's epoch-marker transaction) count too: an
// executor whose restore has just ended is in contact at once, instead of
// waiting for its first fetch to be answered (up to fetchMaxWait) or its
// first heartbeat.
type contactHook struct{ e *Executor }

var _ kgo.HookBrokerE2E = contactHook{}

func (h contactHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.Err() != nil {
		return
	}
	switch kmsg.Key(key) {
	case kmsg.Fetch, kmsg.Heartbeat, kmsg.SyncGroup, kmsg.Produce, kmsg.TxnOffsetCommit, kmsg.EndTxn:
		h.e.lastContact.Store(time.Now().UnixNano())
	}
}

// inContact reports whether the brokers answered within the session
// timeout.
func (e *Executor) inContact() bool {
	last := e.lastContact.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < e.cfg.SessionTimeout
}
