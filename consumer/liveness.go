package consumer

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// contactHook records answered fetches and heartbeats of the group client.
// A fetch long-polls and a heartbeat goes out every few seconds even when
// no command arrives, so an executor that still talks to the group
// coordinator and the partition leaders always has a recent contact; one
// that lost the brokers has none after the session timeout, which is when
// the group gives its partitions away.
type contactHook struct{ e *Executor }

var _ kgo.HookBrokerE2E = contactHook{}

func (h contactHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.Err() != nil {
		return
	}
	if key == int16(kmsg.Fetch) || key == int16(kmsg.Heartbeat) {
		h.e.lastContact.Store(time.Now().UnixNano())
	}
}

// inContact reports whether the brokers answered within the session
// timeout.
func (e *Executor) inContact() bool {
	last := e.lastContact.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < e.cfg.SessionTimeout
}
