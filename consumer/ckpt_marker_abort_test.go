package consumer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/checkpointcheck"
	"github.com/onceflight/onceflight/schemas"
)

// The executor's first transaction — a restore's epoch marker — is
// aborted by the broker although the client is told it committed (kfake
// turns the first EndTxn commit into an abort and answers success, as a
// loaded review8 run of cli's TestAuditWithAPublicKey showed: "epoch 1
// written but 0 read back"). The committer handed the marker and its seal
// to the checkpointer, which published a checkpoint of two leaves the
// journal never held; the next ownership resumed its tree from that
// checkpoint, so no later checkpoint matched the journal and `audit prove`
// found none covering any record of the partition. A tree of an ownership
// whose marker was not read back is never published: every checkpoint
// matches the journal, and the records written after the client was
// recreated are covered.
func TestCheckpointsAfterMarkerAbortedUnseen(t *testing.T) {
	h, c := newClusterHarness(t)
	var flipped atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if req := r.(*kmsg.EndTxnRequest); req.Commit {
			req.Commit = false // the broker aborts; the client hears success
			flipped.Store(true)
			c.DropControl()
		}
		return nil, nil, false
	})
	k := newExecKey(t, "executor-a")
	tk := trustedKeys(t, k.line)
	h.Opts = []consumer.Option{
		consumer.WithSignedJournal(consumer.SignedJournal{Signer: k.signer, Trusted: tk}),
		consumer.WithCheckpoints(consumer.CheckpointConfig{Signer: k.signer, Trusted: tk, Interval: 20 * time.Millisecond}),
	}
	h.Start(t.TempDir())
	for _, e := range []string{"order-0", "order-1", "order-2", "order-3"} {
		h.Submit("c"+e, e, "k"+e, `{}`)
	}
	h.Outcomes(4, map[string][]schemas.Outcome{}, nil)
	if !flipped.Load() {
		t.Fatal("no EndTxn commit was turned into an abort")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var text strings.Builder
	for {
		rep, err := checkpointcheck.Verify(ctx, checkpointcheck.Options{Client: h.Client(), Trusted: tk, Topic: "onceflight.checkpoints"})
		if err != nil {
			t.Fatalf("verify: %v\n%s", err, text.String())
		}
		text.Reset()
		_ = rep.WriteText(&text)
		covered := rep.OK()
		for _, v := range rep.Partitions {
			covered = covered && v.Largest == v.Records
		}
		if covered {
			return
		}
		if !rep.OK() {
			t.Fatalf("a checkpoint does not match the journal:\n%s", text.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
