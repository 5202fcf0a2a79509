package consumer_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestRepeatWritesNoProgress: a transaction writes to Pebble only the
// Progress of partitions it moved. A repeat's transaction moves none (no
// journal record), so repeats answered one at a time add no write to
// Pebble's WAL; they used to rewrite every owned partition's Progress,
// one WAL write each (round 14 (latency)).
func TestRepeatWritesNoProgress(t *testing.T) {
	var syncs atomic.Int64 // of the WAL
	fs := walBytesFS{FS: errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") {
				syncs.Add(1)
			}
		}
		return nil
	})), n: new(atomic.Int64)}
	writes := fs.n
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 30s\n", h.Effects))
	a := h.StartNode("A", t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: []consumer.Option{
		consumer.WithStoreOptions(func(s *dedupe.Settings) { s.FS = fs })}})
	defer func() {
		if err := a.Stop(); err != nil {
			t.Errorf("A: %v", err)
		}
	}()
	onceflighttest.WaitFor(t, 20*time.Second, "A owns every partition", func() bool { return a.Owns(3) })
	seen := map[string][]schemas.Outcome{}
	// newKey answers a new key and waits for its record's WAL sync, which
	// comes after every earlier WAL write: it returns the bytes so far.
	newKey := func(id, key string) int64 {
		s0 := syncs.Load()
		h.Submit(id, "order-1", key, `{}`)
		h.Outcomes(len(seen)+1, seen, nil)
		onceflighttest.WaitFor(t, 20*time.Second, id+"'s record synced", func() bool { return syncs.Load() > s0 })
		return writes.Load()
	}
	w0 := newKey("c0", "k0")
	w1 := newKey("c1", "k1")
	perNewKey := w1 - w0
	for i := range 5 {
		h.Submit(fmt.Sprintf("c1-again-%d", i), "order-1", "k1", `{}`)
		h.Outcomes(len(seen)+1, seen, nil)
	}
	w2 := newKey("c2", "k2")
	for i := range 5 {
		if o := seen[fmt.Sprintf("c1-again-%d", i)]; len(o) != 1 || !o[0].Replayed {
			t.Fatalf("c1-again-%d: %+v, want one replayed outcome", i, o)
		}
	}
	t.Logf("WAL bytes: %d for a new key; %d for five repeats and a new key", perNewKey, w2-w1)
	// A new key's bytes vary a little (its offsets' digits); twelve
	// Progress entries are over 1 KiB.
	if w2-w1 > perNewKey+256 {
		t.Errorf("five repeats and a new key wrote %d WAL bytes, a new key alone %d: the repeats wrote to Pebble", w2-w1, perNewKey)
	}
	h.Audit()
}

// walBytesFS counts the bytes written to Pebble's WAL files (*.log).
type walBytesFS struct {
	vfs.FS
	n *atomic.Int64
}

func (fs walBytesFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return walBytesFile{f, fs.n}, nil
}

func (fs walBytesFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	return fs.wrap(name, f, err)
}

func (fs walBytesFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, cat)
	return fs.wrap(newname, f, err)
}

type walBytesFile struct {
	vfs.File
	n *atomic.Int64
}

func (f walBytesFile) Write(p []byte) (int, error) {
	f.n.Add(int64(len(p)))
	return f.File.Write(p)
}

func (f walBytesFile) WriteAt(p []byte, off int64) (int, error) {
	f.n.Add(int64(len(p)))
	return f.File.WriteAt(p, off)
}
