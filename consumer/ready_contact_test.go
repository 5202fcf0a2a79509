package consumer_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
)

// TestReadyOnceRestoredWithoutAFetch: an executor whose restores have just
// ended is ready without an answer to a fetch of its commands or to a
// heartbeat: its epoch markers are transactions of its group client, and
// their answers are contact with the brokers (contactHook). The broker
// here holds, unanswered, every fetch of the group client (the only
// fetches made with its FetchMaxWait; the restores' journal readers keep
// franz-go's) and every heartbeat. Before, readiness waited for one of
// them: on an idle commands topic the first fetch is answered only after
// FetchMaxWait, which every restore's ready time paid.
func TestReadyOnceRestoredWithoutAFetch(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	hold := func(key kmsg.Key, held func(kmsg.Request) bool) {
		c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			// Handled without a response or an error: never answered.
			return nil, nil, held(req)
		})
	}
	hold(kmsg.Fetch, func(req kmsg.Request) bool {
		return req.(*kmsg.FetchRequest).MaxWaitMillis == int32(consumer.FetchMaxWait/time.Millisecond)
	})
	hold(kmsg.Heartbeat, func(kmsg.Request) bool { return true })
	h := onceflighttest.New(t, onceflighttest.OnBrokers(c.ListenAddrs()))
	h.Start(t.TempDir())
	onceflighttest.WaitFor(t, 15*time.Second, "ready once restored, its fetches and heartbeats unanswered", h.Ex.Ready)
}
