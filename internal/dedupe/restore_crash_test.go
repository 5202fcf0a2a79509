package dedupe

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/onceflight/onceflight/schemas"
)

// TestNoSyncBatchesKeepProgressBehindRecords: a restore's catch-up commits
// its batches without a sync, each with the Progress of the journal
// records it holds, and syncs only its last one (consumer's catchUp). What
// makes that safe is that a crash can lose batches only from the end: if
// it kept a batch's Progress but not an earlier batch's records, restart
// would resume past records the index never got, and a repeat of one of
// them would run again. The crash clones keep a random part of the
// unsynced writes (torn WAL blocks, lost tables and directory entries),
// taken at several points of a catch-up whose small memtable is flushed
// and compacted on the way; each must reopen with every record its
// Progress covers.
func TestNoSyncBatchesKeepProgressBehindRecords(t *testing.T) {
	const batches, perBatch = 24, 150
	key, entity := crashKey, crashEntity
	lost := 0
	for seed := range uint64(6) {
		fs := vfs.NewCrashableMem()
		s, err := Open("db", func(o *Settings) { o.FS = fs }, WithMemTableSize(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 1))
		var clones []*vfs.MemFS
		fresh := NewFresh(batches * perBatch)
		for i := range batches {
			b := s.NewBatch()
			b.UseFresh(fresh)
			for off := i * perBatch; off < (i+1)*perBatch; off++ {
				r := rec(key(off), entity(off), schemas.StatusSucceeded, 0)
				r.Result = []byte(`{"pad":"` + strings.Repeat("x", 300) + `"}`)
				b.PutRecord(r)
			}
			b.SetProgress(0, Progress{JournalOffset: int64((i + 1) * perBatch), Epoch: 1, LastHash: "sha256:h-" + key((i+1)*perBatch-1)})
			if err := b.CommitNoSync(); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(4) == 0 {
				clones = append(clones, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(seed, uint64(i)))}))
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for ci, crashed := range clones {
			p := reopenCrashed(t, crashed, fmt.Sprintf("seed %d clone %d", seed, ci))
			if p.JournalOffset < batches*perBatch {
				lost++
			}
			if p.JournalOffset > 0 && p.LastHash != "sha256:h-"+key(int(p.JournalOffset)-1) {
				t.Errorf("seed %d clone %d: progress %+v does not name the last record of its batch", seed, ci, p)
			}
		}
	}
	if lost == 0 {
		t.Error("no crash clone lost an unsynced batch: the test did not exercise a crash mid-catch-up")
	}
}

// TestIngestedBatchesSurviveACrash: CommitIngest is as durable as Commit.
// A crash right after it returns (the clone keeps a random part of every
// unsynced write) must keep the batch whole: its Progress, and every
// record that Progress covers. Another partition's unsynced batches go
// through the memtable in between, so the tables are ingested over a
// memtable they overlap (flushed or queued for flushing first).
func TestIngestedBatchesSurviveACrash(t *testing.T) {
	const batches, perBatch = 12, 200
	key, entity := crashKey, crashEntity
	for seed := range uint64(3) {
		fs := vfs.NewCrashableMem()
		s, err := Open("db", func(o *Settings) { o.FS = fs }, WithMemTableSize(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 2))
		fresh := NewFresh(batches * perBatch)
		type clone struct {
			fs   *vfs.MemFS
			want int
		}
		var clones []clone
		for i := range batches {
			other := s.NewBatch()
			other.PutRecord(rec(fmt.Sprintf("o%05d", i), entity(i), schemas.StatusSucceeded, 1))
			other.SetProgress(1, Progress{JournalOffset: int64(i + 1), Epoch: 1})
			if err := other.CommitNoSync(); err != nil {
				t.Fatal(err)
			}
			b := s.NewBatch()
			b.UseFresh(fresh)
			for off := i * perBatch; off < (i+1)*perBatch; off++ {
				r := rec(key(off), entity(off), schemas.StatusSucceeded, 0)
				r.Result = []byte(`{"pad":"` + strings.Repeat("x", 300) + `"}`)
				b.PutRecord(r)
			}
			b.SetProgress(0, Progress{JournalOffset: int64((i + 1) * perBatch), Epoch: 1})
			if err := b.CommitIngest(); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) == 0 {
				clones = append(clones, clone{fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(seed, uint64(i)))}), (i + 1) * perBatch})
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if len(clones) == 0 {
			t.Fatalf("seed %d: no crash taken", seed)
		}
		for ci, c := range clones {
			p := reopenCrashed(t, c.fs, fmt.Sprintf("seed %d clone %d", seed, ci))
			if p.JournalOffset != int64(c.want) {
				t.Errorf("seed %d clone %d: progress %d after a crash, want %d: an ingested batch was lost", seed, ci, p.JournalOffset, c.want)
			}
		}
	}
}

// reopenCrashed opens the store "db" a crash left on fs and returns its
// progress, after checking that every record below it is there (the
// progress never names a record a crash lost).
func reopenCrashed(t *testing.T, fs vfs.FS, which string) Progress {
	t.Helper()
	s, err := Open("db", func(o *Settings) { o.FS = fs })
	if err != nil {
		t.Fatalf("%s: reopen after the crash: %v", which, err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	p, err := s.Progress(0)
	if err != nil {
		t.Fatal(err)
	}
	for off := range int(p.JournalOffset) {
		if _, ok, err := s.Lookup(crashEntity(off), crashKey(off)); err != nil || !ok {
			t.Errorf("%s: progress at offset %d, but the record at %d is missing (found %v, err %v)", which, p.JournalOffset, off, ok, err)
			break
		}
	}
	return p
}

// crashKey and crashEntity name the record of journal offset off in the
// crash tests.
func crashKey(off int) string    { return fmt.Sprintf("k%05d", off) }
func crashEntity(off int) string { return fmt.Sprintf("e%03d", off%97) }
