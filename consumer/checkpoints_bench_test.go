package consumer_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/trustlog"
)

// BenchmarkNoopCheckpoints is BenchmarkNoop without and with signing:
// a seal per journal partition per transaction and checkpoints (default
// cadence: every 10 000 records or 10 s), alternated
// so that a busy machine slows both alike; it reports the ratio of the
// medians (cmds/s on over off; ≥ 0.95 is the budget) and of the CPU per
// command.
//
//	go test ./consumer -run '^$' -bench BenchmarkNoopCheckpoints -benchtime 20000x
func BenchmarkNoopCheckpoints(b *testing.B) {
	skey, _, err := trustlog.GenerateKey("bench")
	if err != nil {
		b.Fatal(err)
	}
	signer, err := trustlog.NewSigner(skey)
	if err != nil {
		b.Fatal(err)
	}
	on := []consumer.Option{
		consumer.WithCheckpoints(consumer.CheckpointConfig{Signer: signer, Every: 10_000, Interval: 10 * time.Second}),
		consumer.WithSignedJournal(consumer.SignedJournal{Signer: signer}),
	}
	var rOff, rOn, cOff, cOn []float64
	for range 5 {
		b.Run("off", func(b *testing.B) {
			r, c := benchThroughput(b, 1024, 500, 0, true, false)
			rOff, cOff = append(rOff, r), append(cOff, c)
		})
		b.Run("on", func(b *testing.B) {
			r, c := benchThroughput(b, 1024, 500, 0, true, false, on...)
			rOn, cOn = append(rOn, r), append(cOn, c)
		})
	}
	med := func(xs []float64) float64 {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	if len(rOff) > 0 && len(rOn) > 0 {
		// A parent of sub-benchmarks prints no metrics of its own.
		fmt.Printf("checkpoints on/off: cmds/s median %.0f / %.0f = %.3f; cpu-µs/cmd median %.1f / %.1f = %.3f\n",
			med(rOn), med(rOff), med(rOn)/med(rOff), med(cOn), med(cOff), med(cOn)/med(cOff))
	}
}
