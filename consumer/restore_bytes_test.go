package consumer_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestRestoreBatchBoundedInBytes: a catch-up's batch holds the journal
// values it applies until it is written, and was bounded only in records
// (4 000 into an empty data dir, docs/memory.md's "~4–6 MB of table" for
// ~1 KB records). Records of large commands (data up to --max-data-bytes,
// 512 KiB) made that a table of the partition's whole journal, held in
// memory by every restoring partition at once. A batch is now written once
// it holds restoreBatchBytes (8 MiB) of values: the tables a fresh restore
// ingests stay near that, whatever the records' size.
func TestRestoreBatchBoundedInBytes(t *testing.T) {
	// Small records would be committed through the memtable, not
	// ingested: let a short batch be ingested, so the table shows it.
	t.Cleanup(consumer.SetIngestBatches(4000, 4))
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 30s\n", h.Effects))
	dir1 := t.TempDir()
	h.Start(dir1)
	const n, size = 60, 300 << 10 // ~18 MB of journal in one partition
	blob := make([]byte, size*3/4)
	seen := map[string][]schemas.Outcome{}
	var first string
	for i := range n {
		rand.Read(blob) // incompressible: the table's size is the values'
		data := fmt.Sprintf(`{"blob":%q}`, base64.StdEncoding.EncodeToString(blob))
		if i == 0 {
			first = data
		}
		h.Submit(fmt.Sprintf("a%d", i), "order-1", fmt.Sprintf("k%d", i), data)
	}
	h.Outcomes(n, seen, nil)
	h.Stop()
	if err := os.RemoveAll(dir1); err != nil {
		t.Fatal(err)
	}

	fs := &ingestSizeFS{FS: vfs.Default}
	h.Opts = []consumer.Option{consumer.WithStoreOptions(func(s *dedupe.Settings) { s.FS = fs })}
	h.Start(t.TempDir())
	h.Submit("b0", "order-1", "k0", first) // after the restore: a replay
	h.Outcomes(n+1, seen, nil)
	if o := seen["b0"]; len(o) != 1 || !o[0].Replayed {
		t.Fatalf("k0 after the restore: %+v", o)
	}
	h.Stop()
	tables, largest := fs.stats()
	t.Logf("%d tables ingested, the largest %d bytes", tables, largest)
	if tables == 0 {
		t.Fatal("nothing ingested: the test no longer restores by ingestion")
	}
	// 8 MiB of values, one record past it, and the table's own bytes.
	if largest > 10<<20 {
		t.Fatalf("a restore ingested a table of %d bytes: its batch held the journal's values past 8 MiB", largest)
	}
}

// ingestSizeFS records the size of each table a restore ingests
// (restore-ingest-*.sst).
type ingestSizeFS struct {
	vfs.FS
	mu      sync.Mutex
	tables  int
	largest int64
}

func (fs *ingestSizeFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil || !strings.Contains(name, "restore-ingest-") {
		return f, err
	}
	fs.mu.Lock()
	fs.tables++
	fs.mu.Unlock()
	return &sizedFile{File: f, fs: fs}, nil
}

func (fs *ingestSizeFS) stats() (int, int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.tables, fs.largest
}

type sizedFile struct {
	vfs.File
	fs *ingestSizeFS
	n  atomic.Int64
}

func (f *sizedFile) Write(p []byte) (int, error) {
	n := f.n.Add(int64(len(p)))
	f.fs.mu.Lock()
	f.fs.largest = max(f.fs.largest, n)
	f.fs.mu.Unlock()
	return f.File.Write(p)
}
