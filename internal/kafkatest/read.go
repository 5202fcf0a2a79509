package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// ShortHeartbeats lets a session timeout below kgo's 3s default heartbeat
// interval hold: without it a 2s session expires between heartbeats.
var ShortHeartbeats = []kgo.Opt{kgo.HeartbeatInterval(300 * time.Millisecond)}

// HeaderValue is the value of r's header key ("" when absent).
func HeaderValue(r *kgo.Record, key string) string {
	for _, hd := range r.Headers {
		if hd.Key == key {
			return string(hd.Value)
		}
	}
	return ""
}

// OneOutcomeEach checks that each command id in ids has outcomes of
// exactly one outcome id: republications of the same id are allowed
// (docs/events.md#execution-records), a second answer is not.
func OneOutcomeEach(t testing.TB, seen map[string][]schemas.Outcome, ids []string) {
	t.Helper()
	for _, id := range ids {
		os := seen[id]
		if len(os) == 0 {
			t.Fatalf("command %s: no outcome", id)
		}
		for _, o := range os[1:] {
			if o.ID != os[0].ID {
				t.Fatalf("command %s answered twice: %s %s (by %s) and %s %s (by %s)", id,
					os[0].ID, os[0].Record.Status, os[0].Record.Executor, o.ID, o.Record.Status, o.Record.Executor)
			}
		}
	}
}

// Gauge reads the first series of metric name on reg whose labels include
// labels (name=value pairs) — a gauge's value, else a counter's — and
// whether there is one.
func Gauge(t testing.TB, reg *prometheus.Registry, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue metrics
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// ReadAll reads every committed record of topic partition p, up to its end
// offset at the time of the call (control records skipped), within
// timeout. It reads to the end offset the broker reports rather than for a
// fixed time: a loaded machine may take longer than any window to fetch
// them, and a count must not end before the last record.
func ReadAll(t testing.TB, brokers []string, topic string, p int32, timeout time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	adm.Close()
	if err != nil {
		t.Fatalf("reading %s/%d: end offsets: %v", topic, p, err)
	}
	end, _ := ends.Lookup(topic, p)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	next := int64(-1)
	for next < end.Offset-1 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s/%d: reached %d of %d", topic, p, next, end.Offset)
		}
		for _, r := range fs.Records() {
			next = r.Offset
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		}
	}
	return out
}
