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
	key := func(off int) string { return fmt.Sprintf("k%05d", off) }
	entity := func(off int) string { return fmt.Sprintf("e%03d", off%97) }
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
			s2, err := Open("db", func(o *Settings) { o.FS = crashed })
			if err != nil {
				t.Fatalf("seed %d clone %d: reopen after the crash: %v", seed, ci, err)
			}
			p, err := s2.Progress(0)
			if err != nil {
				t.Fatal(err)
			}
			if p.JournalOffset < batches*perBatch {
				lost++
			}
			if p.JournalOffset > 0 && p.LastHash != "sha256:h-"+key(int(p.JournalOffset)-1) {
				t.Errorf("seed %d clone %d: progress %+v does not name the last record of its batch", seed, ci, p)
			}
			for off := range int(p.JournalOffset) {
				if _, ok, err := s2.Lookup(entity(off), key(off)); err != nil || !ok {
					t.Errorf("seed %d clone %d: progress at offset %d, but the record at %d is missing (found %v, err %v)", seed, ci, p.JournalOffset, off, ok, err)
					break
				}
			}
			if err := s2.Close(); err != nil {
				t.Fatal(err)
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
	key := func(off int) string { return fmt.Sprintf("k%05d", off) }
	entity := func(off int) string { return fmt.Sprintf("e%03d", off%97) }
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
			s2, err := Open("db", func(o *Settings) { o.FS = c.fs })
			if err != nil {
				t.Fatalf("seed %d clone %d: reopen after the crash: %v", seed, ci, err)
			}
			p, err := s2.Progress(0)
			if err != nil {
				t.Fatal(err)
			}
			if p.JournalOffset != int64(c.want) {
				t.Errorf("seed %d clone %d: progress %d after a crash, want %d: an ingested batch was lost", seed, ci, p.JournalOffset, c.want)
			}
			for off := range int(p.JournalOffset) {
				if _, ok, err := s2.Lookup(entity(off), key(off)); err != nil || !ok {
					t.Errorf("seed %d clone %d: progress at offset %d, but the record at %d is missing (found %v, err %v)", seed, ci, p.JournalOffset, off, ok, err)
					break
				}
			}
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
