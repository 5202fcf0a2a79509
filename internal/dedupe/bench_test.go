package dedupe

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"

	"github.com/onceflight/onceflight/schemas"
)

const benchKeys = 200_000

// fillForBench writes benchKeys records (even numbers) and compacts them all into L6, the
// steady state of a long-running index, where db.Get's missing L6 filter
// matters.
func fillForBench(b *testing.B, s *Store) {
	b.Helper()
	data := json.RawMessage(`{"amount":1250,"currency":"EUR","order":"order-1042","reason":"customer request"}`)
	for i := 0; i < benchKeys; i += 1000 {
		batch := s.NewBatch()
		for j := i; j < i+1000 && j < benchKeys; j++ {
			r := rec(fmt.Sprintf("key-%08d", 2*j), fmt.Sprintf("order-%d", j), schemas.StatusSucceeded, int32(j%16))
			r.Data = data
			batch.PutRecord(r)
		}
		if err := batch.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	// Compact panics on a nil context (measured on these machines).
	if err := s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		b.Fatal(err)
	}
	m := s.db.Metrics()
	if m.Levels[6].TablesCount == 0 {
		b.Fatalf("no tables in L6 after compaction:\n%s", m)
	}
	for l := 0; l < 6; l++ {
		if m.Levels[l].TablesCount != 0 {
			b.Fatalf("L%d still has tables after compaction:\n%s", l, m)
		}
	}
}

// BenchmarkLookupMiss compares the two ways of asking for a key that is not
// there (the common case: new idempotency keys). "SeekPrefixGE" is Lookup;
// "Get" is db.Get, which skips L6 bloom filters.
//
// The 8 MiB case is in effect "no block cache": Pebble reserves the memtable
// from the cache, so every filter, index and data block comes from the OS
// page cache through pread. The 64 MiB case holds the whole index.
func BenchmarkLookupMiss(b *testing.B) {
	for _, cache := range []int64{8 << 20, DefaultCacheSize} {
		s, err := Open(b.TempDir(), WithCacheSize(cache))
		if err != nil {
			b.Fatal(err)
		}
		fillForBench(b, s)
		// Odd keys fall between stored ones, inside every table's bounds,
		// so only a filter (or a data block read) can say "absent".
		const benchEntity = "order-1"
		miss := func(i int) string { return fmt.Sprintf("key-%08d", 2*(i%benchKeys)+1) }

		b.Run(fmt.Sprintf("cache=%dMiB/SeekPrefixGE+L6Filters", cache>>20), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, ok, err := s.Lookup(benchEntity, miss(i)); err != nil || ok {
					b.Fatal(ok, err)
				}
			}
		})
		b.Run(fmt.Sprintf("cache=%dMiB/Get", cache>>20), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				_, closer, err := s.db.Get(recordKey(scope(benchEntity, miss(i))))
				if err == nil {
					closer.Close()
					b.Fatal("unexpected hit")
				}
			}
		})
		s.Close()
	}
}

// BenchmarkLookupHit prices the parts of a repeat's lookup (a key that is
// there, in L6): the seek alone (iterator or db.Get) and the whole Lookup
// with the record's decode.
func BenchmarkLookupHit(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fillForBench(b, s)
	j := func(i int) int { return (i * 7919) % benchKeys }
	hit := func(i int) []byte {
		return recordKey(scope(fmt.Sprintf("order-%d", j(i)), fmt.Sprintf("key-%08d", 2*j(i))))
	}
	b.Run("Lookup", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, ok, err := s.Lookup(fmt.Sprintf("order-%d", j(i)), fmt.Sprintf("key-%08d", 2*j(i))); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("SeekPrefixGE", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if ok, err := s.getRaw(s.db, hit(i), nil); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Get", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_, closer, err := s.db.Get(hit(i))
			if err != nil {
				b.Fatal(err)
			}
			closer.Close()
		}
	})
}

// BenchmarkCommitNewKeys is the committer's write of a drain of new keys:
// batches of 1 000 noop-shaped records (an entity per ten keys), each
// written with PutNewRecordBytes and committed without fsync. ns/op is per
// record, the committing goroutine only. cpu-ns/record is the whole
// process's CPU per record until the flushes and compactions the writes
// caused have settled, less what the benchmark's own goroutine spent
// building records: Pebble's background work is most of what a new key
// costs the store (BENCHMARKS.md, round 10 (write)), and ns/op does not
// see it. Run it with -benchtime 300000x or more so that compactions
// happen.
//
// keys=seq writes keys nk-0, nk-1, … (as the end-to-end benchmark does);
// keys=random writes keys in no order (hashes, as UUIDs would be). Records
// are stored key-first, so sequential keys land next to each other and
// compact almost for free, which random keys, the usual case, do not.
func BenchmarkCommitNewKeys(b *testing.B) {
	b.Run("keys=seq", func(b *testing.B) { benchCommitNewKeys(b, func(i int) string { return fmt.Sprintf("nk-%d", i) }) })
	b.Run("keys=random", func(b *testing.B) {
		benchCommitNewKeys(b, func(i int) string { return fmt.Sprintf("nk-%016x", mix64(uint64(i))) })
	})
}

// mix64 is SplitMix64's finalizer: a bijection that spreads consecutive
// integers over the whole range.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func benchCommitNewKeys(b *testing.B, key func(int) string) {
	const batch = 1000
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	data := json.RawMessage(`{"amount":1,"pad":"` + strings.Repeat("x", 180) + `"}`)
	recs := make([]schemas.Record, batch)
	raws := make([][]byte, batch)
	// Records are built on this thread, whose CPU is measured apart.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var building time.Duration
	start := processCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		b.StopTimer()
		t0 := threadCPU(b)
		for j := range recs {
			r := rec(key(i+j), fmt.Sprintf("e-%d", (i+j)%10_000), schemas.StatusSucceeded, 0)
			// Finish times advance as the executor's do (~10 000
			// records a second): the prune index (f/) is keyed by them.
			fin := at.Add(time.Duration(i+j) * 100 * time.Microsecond)
			r.Data, r.FinishedAt, r.StartedAt = data, &fin, &fin
			v, err := wire.SealRecord(&r)
			if err != nil {
				b.Fatal(err)
			}
			recs[j], raws[j] = r, v
		}
		building += threadCPU(b) - t0
		b.StartTimer()
		bt := s.NewBatch()
		for j := range recs {
			bt.PutNewRecordBytes(recs[j], raws[j])
		}
		if err := bt.CommitNoSync(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	settleCompactions(b, s)
	b.ReportMetric(float64((processCPU(b)-start-building).Nanoseconds())/float64(b.N), "cpu-ns/record")
	b.ReportMetric(float64(compactedBytes(s))/float64(b.N), "compacted-B/record")
}

// compactedBytes is what s's compactions have written so far, sstables
// and blob files: with keys spread evenly, every entry a record adds is
// rewritten by each compaction that reaches its level, so this is the
// benchmark's least noisy measure of what an index entry costs.
func compactedBytes(s *Store) uint64 {
	var n uint64
	m := s.db.Metrics()
	for i := range m.Levels {
		n += m.Levels[i].TableBytesCompacted + m.Levels[i].BlobBytesCompacted
	}
	return n
}

// settleCompactions flushes s's memtable and waits (at most a minute) for
// the compactions running to end.
func settleCompactions(b *testing.B, s *Store) {
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	for t0 := time.Now(); s.db.Metrics().Compact.NumInProgress > 0 && time.Since(t0) < time.Minute; {
		time.Sleep(10 * time.Millisecond)
	}
}

// processCPU is the CPU time (user + system) of the whole process so far.
func processCPU(b *testing.B) time.Duration { return rusageCPU(b, syscall.RUSAGE_SELF) }

// threadCPU is the CPU time of the calling OS thread so far: lock the
// goroutine to its thread (runtime.LockOSThread) for it to mean anything.
func threadCPU(b *testing.B) time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD, not in package syscall
	return rusageCPU(b, rusageThread)
}

func rusageCPU(b *testing.B, who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
