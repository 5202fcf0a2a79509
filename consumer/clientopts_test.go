package consumer

import (
	"testing"

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
