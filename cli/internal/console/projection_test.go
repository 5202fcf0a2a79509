package console

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestProjectionThreeExecutorsTwelvePartitions: three executors share 12
// partitions; the console, reading every partition on its own, shows
// every execution whichever executor ran it, keeps showing them (and the
// new ones) after one executor is killed, and after its own restart
// resumes from its stored positions instead of reading everything again.
func TestProjectionThreeExecutorsTwelvePartitions(t *testing.T) {
	h := onceflighttest.New(t)
	tune := func(c *consumer.Config) { c.Partitions = 12 }
	var nodes []*onceflighttest.Node
	for i := range 3 {
		nodes = append(nodes, h.StartNode(fmt.Sprintf("ex-%d", i), filepath.Join(t.TempDir(), "state"), onceflighttest.NodeOptions{Tune: tune, KafkaOpts: kafkatest.ShortHeartbeats}))
	}
	onceflighttest.WaitFor(t, 60*time.Second, "three executors sharing 12 partitions", func() bool {
		n := 0
		for _, nd := range nodes {
			if !nd.Ex.Ready() {
				return false
			}
			n += len(nd.Ex.Owned())
		}
		return n == 12
	})
	dir := t.TempDir()
	p := startProjectionStoppable(t, dir, h.Brokers)
	const first = 120
	for i := range first {
		h.Submit(fmt.Sprintf("c-%d", i), fmt.Sprintf("ent-%d", i), fmt.Sprintf("k-%d", i), `{"n":1}`)
	}
	waitAll(t, p.p, 0, first)
	// The overview is a snapshot refreshed every few seconds: it shows
	// the writers once its refresh has passed the records just indexed.
	// Once the executors committed the commands, no partition is behind,
	// and every partition has an owner.
	writers := map[string]bool{}
	var st Stats
	onceflighttest.WaitFor(t, 30*time.Second, "the overview naming the three executors as the partitions' writers, owners, none behind", func() bool {
		clear(writers)
		st = p.p.Stats()
		total := int64(0)
		for _, ps := range st.Partitions {
			writers[ps.LastWriter] = true
			if ps.Owner == "" || ps.Behind != 0 {
				return false
			}
			total += ps.Commands
		}
		return len(st.Partitions) == 12 && len(writers) == 3 && !writers[""] && total >= first
	})

	// Kill one executor: its partitions move, and the console keeps
	// showing what it ran and what the others run from now.
	if err := nodes[0].Stop(); err != nil {
		t.Fatal(err)
	}
	const second = 60
	for i := first; i < first+second; i++ {
		h.Submit(fmt.Sprintf("c-%d", i), fmt.Sprintf("ent-%d", i), fmt.Sprintf("k-%d", i), `{"n":1}`)
	}
	waitAll(t, p.p, 0, first+second)

	// Restart the console: it reads only what is new.
	before := p.p.Applied()
	p.stop()
	p = startProjectionStoppable(t, dir, h.Brokers)
	waitAll(t, p.p, 0, first+second)
	for i := first + second; i < first+second+10; i++ {
		h.Submit(fmt.Sprintf("c-%d", i), fmt.Sprintf("ent-%d", i), fmt.Sprintf("k-%d", i), `{"n":1}`)
	}
	waitAll(t, p.p, 0, first+second+10)
	// 10 commands: two journal records (in_progress, succeeded) and one
	// outcome each, read again nothing of the first run.
	if got := p.p.Applied(); got > 30 {
		t.Errorf("after restart the projection applied %d entries for 10 new commands (want at most 30; it indexed %d before): it re-read what it had", got, before)
	}

	// With every executor stopped, commands sent now are the executors'
	// lag on the overview.
	for _, nd := range nodes[1:] {
		if err := nd.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		h.Submit(fmt.Sprintf("c-late-%d", i), fmt.Sprintf("ent-%d", i), fmt.Sprintf("late-%d", i), `{"n":1}`)
	}
	onceflighttest.WaitFor(t, 30*time.Second, "the overview counting the 5 commands no executor took as behind", func() bool {
		behind := int64(0)
		for _, ps := range p.p.Stats().Partitions {
			behind += ps.Behind
		}
		return behind == 5
	})
}

type stoppable struct {
	p    *Projection
	stop func()
}

func startProjectionStoppable(t *testing.T, dir string, brokers []string) *stoppable {
	t.Helper()
	p, stop := runProjection(t, dir, brokers, WithLogger(slog.Default()))
	return &stoppable{p: p, stop: stop}
}

// waitAll waits until keys k-from..k-(to-1) of entities ent-i are all
// succeeded in the projection.
func waitAll(t *testing.T, p *Projection, from, to int) {
	t.Helper()
	onceflighttest.WaitFor(t, 60*time.Second, fmt.Sprintf("executions %d..%d in the console", from, to-1), func() bool {
		for i := from; i < to; i++ {
			v, err := p.Get(fmt.Sprintf("ent-%d", i), fmt.Sprintf("k-%d", i))
			if err != nil || v.Exec.Status != schemas.StatusSucceeded {
				return false
			}
		}
		return true
	})
}
