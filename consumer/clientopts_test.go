package consumer

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/kafkaconf"
)

// TestNoClientMetricsByDefault: the executor's clients push no KIP-714
// client metrics unless its connection properties ask for them
// (enable.metrics.push=true), also when it is given no properties at all.
func TestNoClientMetricsByDefault(t *testing.T) {
	disabled := func(opts []kgo.Opt) bool {
		t.Helper()
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		return cl.OptValue(kgo.DisableClientMetrics).(bool)
	}
	var c Config
	c.setDefaults()
	if !disabled(c.KafkaOpts) {
		t.Error("no connection properties: the executor's clients push client metrics")
	}
	on, err := kafkaconf.New([]kafkaconf.Property{{Key: "enable.metrics.push", Value: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	c = Config{KafkaOpts: on.Opts()}
	c.setDefaults()
	if disabled(c.KafkaOpts) {
		t.Error("enable.metrics.push=true: client metrics are off")
	}
}

// TestFetchLongPollBoundsResume: the executor's fetch is held by the
// broker for at most fetchMaxWait, not franz-go's 5 s default, since a
// partition resumed after its buffer bound joins only the next fetch
// request (checkPause).
func TestFetchLongPollBoundsResume(t *testing.T) {
	c := Config{Brokers: []string{"127.0.0.1:1"}, Group: "g", ExecutorID: "x"}
	c.Topics.Commands = "commands"
	c.setDefaults()
	e := &Executor{cfg: c}
	cl, err := e.newClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := cl.OptValue(kgo.FetchMaxWait).(time.Duration); got > time.Second {
		t.Fatalf("fetch max wait %s: a resumed partition may wait that long for its first fetch", got)
	}
}
