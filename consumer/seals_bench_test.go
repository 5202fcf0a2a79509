package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// BenchmarkRestoreVerified: a signed journal of b.N commands is restored
// into an empty data dir by a new executor, without and with
// --require-signed-journal (every record's leaf hashed and matched to its
// seal, one signature checked per chain or per 1 000 records), alternated.
// It reports the median restore times and their ratio (budget: at most
// 1.2).
//
//	go test ./consumer -run '^$' -bench BenchmarkRestoreVerified -benchtime 20000x
func BenchmarkRestoreVerified(b *testing.B) {
	h := onceflighttest.New(b)
	k := newExecKey(b, "bench")
	tk := trustedKeys(b, k.line)
	n := h.StartNode("writer", b.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: signing(k, tk)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	batch := make([]*kgo.Record, 0, 1000)
	for i := range b.N {
		r, err := schemas.EncodeCommand(schemas.Command{ID: fmt.Sprintf("c%d", i), Source: "bench", Type: "noop.ping",
			Subject: fmt.Sprintf("e-%d", i%997), IdempotencyKey: fmt.Sprintf("k%d", i), Data: json.RawMessage(`{}`)}, schemas.Binary)
		if err != nil {
			b.Fatal(err)
		}
		r.Topic = "onceflight.commands"
		if batch = append(batch, r); len(batch) == cap(batch) || i == b.N-1 {
			if err := h.Client().ProduceSync(ctx, batch...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	h.Outcomes(b.N, map[string][]schemas.Outcome{}, nil)
	if err := n.Stop(); err != nil {
		b.Fatal(err)
	}
	restore := func(name string, opts []consumer.Option) time.Duration {
		start := time.Now()
		nd := h.StartNode(name, b.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: opts})
		for !nd.Owns(onceflighttest.Partitions) {
			if time.Since(start) > time.Minute {
				b.Fatalf("%s: not restored: %s", name, nd.Ex.NotReady())
			}
			time.Sleep(time.Millisecond)
		}
		d := time.Since(start)
		if err := nd.Stop(); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var off, on []time.Duration
	b.ResetTimer()
	for i := range 5 {
		// Both sign what they write (their epoch markers); only one checks.
		off = append(off, restore(fmt.Sprintf("plain-%d", i), []consumer.Option{consumer.WithSignedJournal(consumer.SignedJournal{Signer: k.signer})}))
		on = append(on, restore(fmt.Sprintf("verified-%d", i), signing(k, tk)))
	}
	b.StopTimer()
	slices.Sort(off)
	slices.Sort(on)
	b.ReportMetric(float64(off[len(off)/2].Milliseconds()), "ms_plain")
	b.ReportMetric(float64(on[len(on)/2].Milliseconds()), "ms_verified")
	b.ReportMetric(float64(on[len(on)/2])/float64(off[len(off)/2]), "verified/plain")
}
