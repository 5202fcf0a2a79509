package consumer_test

// Until the merge: the old names of the in-process harness for
// network_faults_test.go, soak_test.go and effects_net_test.go (being
// changed on another branch), each a thin forward to package executortest.
// Delete this file once those files use executortest's names.

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/executortest"
	"github.com/onceflight/onceflight/schemas"
)

type harness struct{ *executortest.Harness }

func newHarness(t *testing.T) *harness { return &harness{executortest.New(t)} }

func newHarnessOn(t *testing.T, brokers []string) *harness {
	return &harness{executortest.New(t, executortest.OnBrokers(brokers))}
}

func (h *harness) submit(id, entity, key, data string)       { h.Submit(id, entity, key, data) }
func (h *harness) allOutcomes() map[string][]schemas.Outcome { return h.AllOutcomes() }
func (h *harness) effectCount() map[string]int               { return h.EffectCount() }
func (h *harness) audit()                                    { h.Audit() }

func (h *harness) outcomes(n int, seen map[string][]schemas.Outcome, dead *[]*kgo.Record) {
	h.Outcomes(n, seen, dead)
}

type nodeOpts struct {
	tune   func(*consumer.Config)
	exOpts []consumer.Option
}

type node struct {
	*executortest.Node
	ex *consumer.Executor
}

func (h *harness) startNode(id, dataDir string, o nodeOpts) *node {
	n := h.StartNode(id, dataDir, executortest.NodeOptions{Tune: o.tune, ExecutorOpts: o.exOpts})
	return &node{Node: n, ex: n.Ex}
}

func (n *node) stop() error     { return n.Stop() }
func (n *node) owns(k int) bool { return n.Owns(k) }

// counter and gauge are for effects_net_test.go, which arrives with the
// merge; until then nothing here calls them.
func (n *node) counter(name string, labels map[string]string) float64 { return n.Counter(name, labels) }

var _, _ = (*node).counter, gauge

var (
	waitFor         = executortest.WaitFor
	oneOutcomeEach  = executortest.OneOutcomeEach
	shortHeartbeats = executortest.ShortHeartbeats
	gauge           = executortest.Gauge
)
