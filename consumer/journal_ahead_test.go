package consumer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// A data dir that has read a journal partition further than the journal
// now ends (the journal lost its tail to an unclean leader election, or
// was created again where the brokers give no topic ids) is not that
// journal's cache any more. Its restore read nothing, wrote its marker,
// and refused the epoch it read back ("another owner is writing"): the
// executor left and rejoined the group again and again, a rebalance of
// every member each time, with no reason an operator could act on. The
// partition is held instead, saying why.
func TestDataDirAheadOfJournalIsHeld(t *testing.T) {
	h := onceflighttest.New(t)
	dir := t.TempDir()
	h.Start(dir)
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Outcomes(1, seen, nil)
	h.Stop()

	p := partitioner.ForEntity("order-1", onceflighttest.Partitions)
	s, err := dedupe.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := s.Progress(p)
	if err == nil {
		prog.JournalOffset += 1000
		b := s.NewBatch()
		b.SetProgress(p, prog)
		err = b.Commit()
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	h.Start(dir)
	onceflighttest.WaitFor(t, 30*time.Second, "the partition held", func() bool {
		return strings.Contains(h.Ex.NotReady(), "held") && strings.Contains(h.Ex.NotReady(), "ends at offset")
	})
	if r := h.Ex.NotReady(); !strings.Contains(r, "move the data dir aside") {
		t.Fatalf("held without saying what to do: %q", r)
	}
}
