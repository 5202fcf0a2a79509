package consumer_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestDataDirLossRestoresByIngest is TestDataDirLossRestoresFromJournal
// with batches small enough that the restore into the empty data dir
// ingests its catch-up as tables (several per partition, the last one
// short): every key keeps its record and is replayed, not executed again,
// and a key journaled in_progress and later settled is not left waiting.
func TestDataDirLossRestoresByIngest(t *testing.T) {
	t.Cleanup(consumer.SetIngestBatches(6, 2))

	h := onceflighttest.New(t)
	dir1 := t.TempDir()
	h.Start(dir1)
	const n = 60
	for i := range n {
		h.Submit(fmt.Sprintf("a%d", i), fmt.Sprintf("e-%d", i%9), fmt.Sprintf("key-%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(n, seen, nil)
	h.Stop()
	if err := os.RemoveAll(dir1); err != nil {
		t.Fatal(err)
	}

	h.Start(t.TempDir())
	for i := range n {
		h.Submit(fmt.Sprintf("b%d", i), fmt.Sprintf("e-%d", i%9), fmt.Sprintf("key-%d", i), `{}`)
	}
	// New keys of the same entities: their entity states were restored
	// by ingestion too, and must not hold an in-flight key.
	for i := range 9 {
		h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("e-%d", i), fmt.Sprintf("new-%d", i), `{}`)
	}
	h.Outcomes(2*n+9, seen, nil)
	for i := range n {
		o := seen[fmt.Sprintf("b%d", i)]
		orig := seen[fmt.Sprintf("a%d", i)]
		if len(o) != 1 || !o[0].Replayed || o[0].Record.Hash != orig[0].Record.Hash {
			t.Fatalf("key-%d after data loss: %+v", i, o)
		}
	}
	for i := range 9 {
		if o := seen[fmt.Sprintf("c%d", i)]; len(o) != 1 || o[0].Replayed || o[0].Record.Status != schemas.StatusSucceeded {
			t.Fatalf("new-%d after the restore: %+v", i, o)
		}
	}
	for k, c := range h.EffectCount() {
		if c != 1 {
			t.Fatalf("%s executed %d times", k, c)
		}
	}
}
