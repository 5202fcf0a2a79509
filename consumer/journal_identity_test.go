package consumer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A data dir is the cache of one journal. Moved to another journal (new
// topics, README "Partition counts are fixed"; a journal deleted and
// created again), its Progress names offsets of the old one: restoring on
// from them skipped the new journal's records below that offset, and a
// repeat of a key they hold executed again (G2). The executor binds the
// store to its journal (dedupe.Store.BindJournal) and rebuilds a store of
// another one from the journal.
func TestDataDirOfAnotherJournalIsRebuilt(t *testing.T) {
	t.Run("another topic", func(t *testing.T) {
		dataDirOfAnotherJournal(t, "j2", nil)
	})
	t.Run("topic recreated", func(t *testing.T) {
		dataDirOfAnotherJournal(t, "j1", func(h *onceflighttest.Harness) {
			adm := kadm.NewClient(h.Client())
			resp, err := adm.DeleteTopics(context.Background(), "j1")
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	})
}

// dataDirOfAnotherJournal runs an executor on journal j1 with one data
// dir, then (after between) on journal next with another, then the first
// dir on next, and checks a repeat of next's first key is a replay.
func dataDirOfAnotherJournal(t *testing.T, next string, between func(*onceflighttest.Harness)) {
	h := onceflighttest.New(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	seen := map[string][]schemas.Outcome{}
	n := 0

	// dirA is the cache of journal j1: entity order-1's partition holds
	// a marker and five records, with their commit markers.
	h.Tune = func(c *consumer.Config) { c.Topics.Journal = "j1" }
	h.Start(dirA)
	for i := range 5 {
		h.Submit(fmt.Sprintf("a%d", i), "order-1", fmt.Sprintf("old-%d", i), `{}`)
	}
	n += 5
	h.Outcomes(n, seen, nil)
	h.Stop()
	if between != nil {
		between(h)
	}

	// The executors move to journal next, with a new data dir: more
	// records there than dirA read of j1.
	h.Tune = func(c *consumer.Config) { c.Topics.Journal = next }
	h.Start(dirB)
	for i := range 10 {
		h.Submit(fmt.Sprintf("b%d", i), "order-1", fmt.Sprintf("new-%d", i), `{}`)
	}
	n += 10
	h.Outcomes(n, seen, nil)
	h.Stop()

	// dirA comes back, now on next: a repeat of its first key is a replay.
	h.Start(dirA)
	h.Submit("c0", "order-1", "new-0", `{}`)
	n++
	h.Outcomes(n, seen, nil)
	if got := h.EffectsOf("order-1", "new-0"); got != 1 {
		t.Fatalf("key new-0 took effect %d times, want 1: the data dir of the old journal was restored on from its offset in the new one, skipping the new one's first records", got)
	}
	if o := seen["c0"][0]; !o.Replayed {
		t.Fatalf("repeat of new-0: %+v, want replayed", o)
	}
}
