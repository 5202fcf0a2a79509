package consumer_test

import (
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/schemas"
)

// franz-go v1.22.3 can end a transaction it was told to commit as an
// abort, and report the commit done (its EndTransaction finds no
// partition marked added after produces that succeeded; round 25 (ckpt)).
// Here the broker aborts the first commit of commands' answers and the
// client's logger hears franz-go's line, as it would then. Taken for a
// commit, the answers were applied to Pebble and never published: their
// outcomes never came (G4). The committer retries such a transaction
// like any abort: every command is answered once, its effect once.
func TestCommitTurnedIntoAbortIsRetried(t *testing.T) {
	h, c := newClusterHarness(t)
	h.Start(t.TempDir())
	seen := map[string][]schemas.Outcome{}
	h.Submit("warm", "order-w", "kw", `{}`)
	h.Outcomes(1, seen, nil)
	var flipped atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if req := r.(*kmsg.EndTxnRequest); req.Commit {
			req.Commit = false // franz-go sent an abort ...
			h.Ex.NoteSilentAbort()
			flipped.Store(true) // ... and will report the commit done
			c.DropControl()
		}
		return nil, nil, false
	})
	for _, e := range []string{"order-0", "order-1", "order-2", "order-3"} {
		h.Submit("c"+e, e, "k"+e, `{}`)
	}
	h.Outcomes(5, seen, nil) // with warm's
	if !flipped.Load() {
		t.Fatal("no EndTxn commit was turned into an abort")
	}
	for _, e := range []string{"order-0", "order-1", "order-2", "order-3"} {
		if o := seen["c"+e]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
			t.Fatalf("command c%s answered %+v", e, o)
		}
		if n := h.EffectsOf(e, "k"+e); n != 1 {
			t.Fatalf("key k%s took effect %d times", e, n)
		}
	}
	h.Stop()
	h.Audit()
}
