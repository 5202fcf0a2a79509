package consumer

import (
	"os"
	"testing"

	"github.com/onceflight/onceflight/internal/dedupe"
)

// TestMain checks, in every test of the executor, the "absent" the
// committer claims for new keys (job.markFresh → PutNewRecordBytes): a
// stored record under such a key fails its transaction's batch, where in
// production it would silently leave old index entries behind.
//
// Every outcome event buffer the committer gives back for reuse is
// overwritten first (poisonEventBufs): a buffer released while anything
// could still read it — the producer, Pebble's batch, a later
// transaction — shows up as garbage in the outcomes, journal or store
// any test reads, not only when it happens to be reused in time.
func TestMain(m *testing.M) {
	dedupe.CheckAbsent = true
	poisonEventBufs = true
	os.Exit(m.Run())
}
