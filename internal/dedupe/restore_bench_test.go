//go:build linux

package dedupe

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// BenchmarkRestoreIngest is a restore's catch-up of one fresh partition:
// noop-shaped journal values (a key per record, an entity per ten),
// decoded for the index and ingested 4 000 records a table, as consumer's
// catchUp does. ns/op is per journal record; background compactions are
// not in ns/op but are in cpu-ns/record, the process's CPU time from each
// store's Open to its Close (which waits for compactions under way) per
// record: on a loaded machine it is steadier than ns/op.
//
// keys=seq names keys fk-0, fk-1, …; keys=random in no order (see
// BenchmarkCommitNewKeys: records are stored key-first).
func BenchmarkRestoreIngest(b *testing.B) {
	b.Run("keys=seq", func(b *testing.B) { benchRestoreIngest(b, func(i int) string { return fmt.Sprintf("fk-%d", i) }) })
	b.Run("keys=random", func(b *testing.B) {
		benchRestoreIngest(b, func(i int) string { return fmt.Sprintf("fk-%016x", mix64(uint64(i))) })
	})
}

func benchRestoreIngest(b *testing.B, key func(int) string) {
	const n = 20_000
	journal := make([][]byte, n)
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	for i := range journal {
		r := rec(key(i), fmt.Sprintf("e-%d", i%(n/10)), schemas.StatusSucceeded, 0)
		r.Data = json.RawMessage(`{"amount":1,"pad":"` + strings.Repeat("x", 180) + `"}`)
		r.FinishedAt, r.StartedAt = &at, &at
		r.EntityVersion = int64(i)
		v, err := wire.SealRecord(&r)
		if err != nil {
			b.Fatal(err)
		}
		journal[i] = v
	}
	b.ResetTimer()
	cpu0, records := processCPU(b), 0
	for range b.N/n + 1 {
		b.StopTimer()
		s, err := Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		fresh := NewFresh(n)
		b.StartTimer()
		for start := 0; start < n; start += 4000 {
			batch := s.NewBatchSize(4000) // as consumer's catchUp
			batch.UseFresh(fresh)
			for _, raw := range journal[start : start+4000] {
				r, err := schemas.UnmarshalRecordIndex(raw)
				if err != nil {
					b.Fatal(err)
				}
				batch.PutRecordBytes(r, raw)
			}
			batch.SetProgress(0, Progress{JournalOffset: int64(start + 4000)})
			if err := batch.CommitIngest(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		s.Close()
		records += n
		b.StartTimer()
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(records), "cpu-ns/record")
}

// BenchmarkIngestSort is the sort of one CommitIngest table's entries: a
// batch of 4 000 noop-shaped records (an entity per ten), as the restore
// writes them.
func BenchmarkIngestSort(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	batch := s.NewBatch()
	for i := range 4000 {
		r := rec(fmt.Sprintf("fk-%d", i), fmt.Sprintf("e-%d", i%400), schemas.StatusSucceeded, 0)
		r.FinishedAt, r.StartedAt = &at, &at
		batch.PutRecord(r)
	}
	t := batch.newTableEntries()
	if err := batch.finish(func() kvWriter { return t }, nil, func() error { return nil }, func() {}); err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU(b)
	for b.Loop() {
		if _, err := t.sorted(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
