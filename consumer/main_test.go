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
func TestMain(m *testing.M) {
	dedupe.CheckAbsent = true
	os.Exit(m.Run())
}
