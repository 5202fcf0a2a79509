//go:build linux

package dedupe

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// BenchmarkRestoreParts is a whole restore into an empty store as serve
// runs it: 12 partitions of 8 000 noop-shaped records with random keys,
// restored 4 at a time (consumer's restoreSlots), each ingested 4 000
// records a table. It reports the time until the last table is ingested
// (ready-ms), the process's CPU per record until then and until Pebble's
// compactions have settled, Pebble's compaction figures, and the cost of
// a lookup (of a stored key and of a key never written) just after ready
// and once compactions have settled.
//
// It also reports where the restored records' values are once
// compactions have settled: table-MB (sstables, which hold records kept
// inline) and blob-MB (blob files, records separated by valueSeparation).
// RESTORE_METRICS=<file> writes Pebble's metrics at the end of the last run.
// (Round 15's benchmark, without its bulk load.)
func BenchmarkRestoreParts(b *testing.B) {
	for _, parts := range []int{12, 24} {
		b.Run(fmt.Sprintf("records=%d", parts*8000), func(b *testing.B) { benchRestoreParts(b, parts) })
	}
}

func benchRestoreParts(b *testing.B, parts int) {
	const perPart, slots, table = 8000, 4, 4000
	journal := make([][][]byte, parts)
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	for p := range journal {
		journal[p] = make([][]byte, perPart)
		for i := range journal[p] {
			n := p*perPart + i
			r := rec(fmt.Sprintf("fk-%016x", mix64(uint64(n))), fmt.Sprintf("e-%d", n%(parts*perPart/10)), schemas.StatusSucceeded, int32(p))
			r.Data = json.RawMessage(`{"amount":1,"pad":"` + strings.Repeat("x", 180) + `"}`)
			fin := at.Add(time.Duration(i) * time.Millisecond)
			r.FinishedAt, r.StartedAt = &fin, &fin
			r.EntityVersion = int64(n)
			v, err := wire.SealRecord(&r)
			if err != nil {
				b.Fatal(err)
			}
			journal[p][i] = v
		}
	}
	// New keys written after the restore, as the executor's transactions
	// write them (500 records a batch, through the memtable).
	const newKeys, txn = 40_000, 500
	newJournal := make([][]byte, newKeys)
	for i := range newJournal {
		n := parts*perPart + i
		r := rec(fmt.Sprintf("nk-%016x", mix64(uint64(n))), fmt.Sprintf("e-%d", n%(parts*perPart/10)), schemas.StatusSucceeded, int32(n%parts))
		r.Data = json.RawMessage(`{"amount":1,"pad":"` + strings.Repeat("x", 180) + `"}`)
		fin := at.Add(time.Hour + time.Duration(i)*time.Millisecond)
		r.FinishedAt, r.StartedAt = &fin, &fin
		v, err := wire.SealRecord(&r)
		if err != nil {
			b.Fatal(err)
		}
		newJournal[i] = v
	}
	var newCPU, newCompactedMB, tableMB, blobMB, l0settled, hitSettledNs, missSettledNs, lookCPU, readyNs, readyCPU, settleCPU, compactions, compactedMB, ingestedMB, l0max, hitNs, missNs float64
	for range b.N {
		s, err := Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		cpu0, t0 := processCPU(b), time.Now()
		stop := make(chan struct{})
		var l0 atomic.Int64
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if n := s.db.Metrics().Levels[0].TablesCount; n > l0.Load() {
					l0.Store(n)
				}
			}
		}()
		work := make(chan int, parts)
		for p := range parts {
			work <- p
		}
		close(work)
		var wg sync.WaitGroup
		for range slots {
			wg.Go(func() {
				for p := range work {
					fresh := NewFresh(perPart)
					for start := 0; start < perPart; start += table {
						batch := s.NewBatchSize(table)
						batch.UseFresh(fresh)
						for _, raw := range journal[p][start : start+table] {
							r, err := schemas.UnmarshalRecordIndex(raw)
							if err != nil {
								b.Error(err)
								return
							}
							batch.PutRecordBytes(r, raw)
						}
						batch.SetProgress(int32(p), Progress{JournalOffset: int64(start + table)})
						if err := batch.CommitIngest(); err != nil {
							b.Error(err)
							return
						}
						batch.Close()
					}
				}
			})
		}
		wg.Wait()
		readyNs += float64(time.Since(t0).Nanoseconds())
		readyCPU += float64((processCPU(b) - cpu0).Nanoseconds())
		// Lookups just after ready: stored keys and keys never written.
		h, ms, c := lookups(b, s, parts*perPart)
		hitNs, missNs, lookCPU = hitNs+h, missNs+ms, lookCPU+c
		settle(s)
		close(stop)
		settleCPU += float64((processCPU(b) - cpu0).Nanoseconds()) - c
		h, ms, _ = lookups(b, s, parts*perPart)
		hitSettledNs, missSettledNs = hitSettledNs+h, missSettledNs+ms
		m := s.db.Metrics()
		var comp, ing, tables uint64
		for i := range m.Levels {
			comp += m.Levels[i].TableBytesCompacted + m.Levels[i].BlobBytesCompacted
			ing += m.Levels[i].TableBytesIngested
			tables += uint64(m.Levels[i].TablesSize)
		}
		tableMB += float64(tables) / (1 << 20)
		blobMB += float64(m.BlobFiles.LiveSize) / (1 << 20)
		compactions += float64(m.Compact.Count)
		l0settled += float64(m.Levels[0].TablesCount)
		compactedMB += float64(comp) / (1 << 20)
		ingestedMB += float64(ing) / (1 << 20)
		l0max += float64(l0.Load())
		// New keys after the restore, until their compactions settle.
		cpu1 := processCPU(b)
		for start := 0; start < newKeys; start += txn {
			batch := s.NewBatchSize(txn)
			for _, raw := range newJournal[start : start+txn] {
				r, err := schemas.UnmarshalRecordIndex(raw)
				if err != nil {
					b.Fatal(err)
				}
				batch.PutRecordBytes(r, raw)
			}
			if err := batch.Commit(); err != nil {
				b.Fatal(err)
			}
			batch.Close()
		}
		settle(s)
		newCPU += float64((processCPU(b) - cpu1).Nanoseconds())
		m2 := s.db.Metrics()
		var comp2 uint64
		for i := range m2.Levels {
			comp2 += m2.Levels[i].TableBytesCompacted + m2.Levels[i].BlobBytesCompacted
		}
		newCompactedMB += float64(comp2-comp) / (1 << 20)
		if f := os.Getenv("RESTORE_METRICS"); f != "" {
			_ = os.WriteFile(f, []byte(m.String()), 0o644)
		}
		s.Close()
	}
	n := float64(b.N)
	rec := float64(parts * perPart)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(readyNs/n/1e6, "ready-ms")
	b.ReportMetric(readyCPU/n/rec, "cpu-ns/rec-ready")
	b.ReportMetric(settleCPU/n/rec, "cpu-ns/rec-settled")
	b.ReportMetric(compactions/n, "compactions")
	b.ReportMetric(compactedMB/n, "compacted-MB")
	b.ReportMetric(ingestedMB/n, "ingested-MB")
	b.ReportMetric(l0max/n, "l0-max-files")
	b.ReportMetric(newCPU/n/newKeys, "cpu-ns/new-key-after")
	b.ReportMetric(newCompactedMB/n, "new-compacted-MB")
	b.ReportMetric(tableMB/n, "table-MB")
	b.ReportMetric(blobMB/n, "blob-MB")
	b.ReportMetric(l0settled/n, "l0-settled-files")
	b.ReportMetric(hitNs/n, "hit-ns")
	b.ReportMetric(lookCPU/n, "lookup-cpu-ns")
	b.ReportMetric(hitSettledNs/n, "hit-settled-ns")
	b.ReportMetric(missSettledNs/n, "miss-settled-ns")
	b.ReportMetric(missNs/n, "miss-ns")
}

// settle waits until no compaction has run for 300 ms.
func settle(s *Store) {
	for quiet := time.Now(); time.Since(quiet) < 300*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		if s.db.Metrics().Compact.NumInProgress > 0 {
			quiet = time.Now()
		}
	}
}

// lookups times lookups of stored keys and of keys never written on a
// locked thread: ns per hit and per miss, and the thread's CPU for both
// (so that the compactions running beside them are not counted).
func lookups(b *testing.B, s *Store, records int) (hitNs, missNs, cpuNs float64) {
	const n = 4000
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, t := threadCPU(b), time.Now()
	for i := range n {
		k := (i * 7919) % records
		if _, found, err := s.Lookup(fmt.Sprintf("e-%d", k%(records/10)), fmt.Sprintf("fk-%016x", mix64(uint64(k)))); err != nil || !found {
			b.Fatalf("lookup %d: found %v, %v", k, found, err)
		}
	}
	hitNs = float64(time.Since(t).Nanoseconds()) / n
	t = time.Now()
	for i := range n {
		if _, found, err := s.Lookup("e-1", fmt.Sprintf("nk-%016x", mix64(uint64(i)))); err != nil || found {
			b.Fatalf("lookup of a missing key: found %v, %v", found, err)
		}
	}
	missNs = float64(time.Since(t).Nanoseconds()) / n
	return hitNs, missNs, float64((threadCPU(b) - c0).Nanoseconds())
}
