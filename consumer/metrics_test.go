package consumer

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The metrics follow Prometheus naming conventions (what promtool check
// metrics checks): units, _total on counters, help texts.
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	// Vectors only appear once they have a child.
	m.commands.WithLabelValues("a", "succeeded").Inc()
	m.duration.WithLabelValues("a", "succeeded").Observe(0.1)
	m.lag.WithLabelValues("0").Set(1)
	m.fenced.WithLabelValues("commit").Inc()
	m.txns.WithLabelValues("committed").Inc()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil || n < 10 {
		t.Fatalf("gathered %d metrics (%v)", n, err)
	}
}
