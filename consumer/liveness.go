package consumer

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// contactHook records the answers of the group client that show it in
// contact with the brokers: fetches and heartbeats, and its group join and
// transactional writes (SyncGroup, Produce, TxnOffsetCommit, EndTxn). A
// fetch long-polls and a heartbeat goes out every few seconds even when
// no command arrives, so an executor that still talks to the group
// coordinator and the partition leaders always has a recent contact; one
// that lost the brokers has none after the session timeout, which is when
// the group gives its partitions away.
//
// The writes count because a restore ends with them: each partition's
// epoch marker is a transaction of this client, fenced by the group's
// generation, so an executor whose restores just ended was answered by
// the coordinator and the journal's leaders a moment ago. With fetches
// and heartbeats alone, readiness after a restore waited for the first
// fetch of the commands, which the broker holds for fetchMaxWait when no
// command is waiting: 250 ms added to every restore's ready time
// (BENCHMARKS.md, round 16 (restore)).
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
