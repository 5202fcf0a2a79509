//go:build linux

package dedupe

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// BenchmarkIntentPebble is the Pebble side of draining 200 000 http
// commands, with and without their intents (docs/guarantees.md G3: an
// in_progress record committed before the request): synced batches of 200
// commands, each holding the intents of the next 200 keys and the final
// records of the previous 200, as the committer's transactions do while
// requests are out. Without intents each batch holds the finals only.
//
// An intent and its final record mostly meet in one memtable, where the
// flush keeps only the final; but the intent still fills the memtable, so
// there are about twice as many flushes, and with keys spread evenly every
// flushed table is rewritten by the next L0 → Lbase compaction with the
// Lbase it overlaps. The mem=16M run shows that part: the same writes
// with memtables twice as large. cpu-µs/cmd is the process's CPU (Pebble's
// flushes and compactions included) per command, records encoded here
// (the executor seals them before: wire.SealRecord). A run takes about a
// minute:
//
//	go test ./internal/dedupe -run '^$' -bench BenchmarkIntentPebble -benchtime 1x -count 3
func BenchmarkIntentPebble(b *testing.B) {
	const perTx = 200
	const keys = 200_000
	data := json.RawMessage(`{"amount":1250,"currency":"EUR","order":"order-1042","reason":"customer request","note":"` + fmt.Sprintf("%0100d", 0) + `"}`)
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	key := func(i int) string { return fmt.Sprintf("k-%016x", uint64(i)*0x9E3779B97F4A7C15) }
	entity := func(i int) string { return fmt.Sprintf("order-%d", i%10000) }
	record := func(i int, st schemas.Status) schemas.Record {
		r := rec(key(i), entity(i), st, int32(i%12))
		r.Data, r.StartedAt = data, &at
		if st == schemas.StatusInProgress {
			d := at.Add(time.Second)
			r.Deadline, r.Result = &d, nil
		} else {
			r.FinishedAt = &at
		}
		return r
	}
	processCPU := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, c := range []struct {
		intents  bool
		memTable int64
	}{{false, DefaultMemTableSize}, {true, DefaultMemTableSize}, {true, 2 * DefaultMemTableSize}} {
		b.Run(fmt.Sprintf("intents=%v/mem=%dM", c.intents, c.memTable>>20), func(b *testing.B) {
			var cpu time.Duration
			n := 0
			for b.Loop() {
				s, err := Open(b.TempDir(), func(s *Settings) { s.memTable = c.memTable })
				if err != nil {
					b.Fatal(err)
				}
				t0 := processCPU()
				for t := 0; t <= keys; t += perTx {
					batch := s.NewBatch()
					if c.intents && t < keys {
						for i := t; i < t+perTx; i++ {
							batch.PutNewRecordBytes(record(i, schemas.StatusInProgress), nil)
						}
					}
					for i := max(t-perTx, 0); i < t; i++ {
						if c.intents {
							batch.PutRecordBytes(record(i, schemas.StatusSucceeded), nil)
						} else {
							batch.PutNewRecordBytes(record(i, schemas.StatusSucceeded), nil)
						}
					}
					if err := batch.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU() - t0
				n += keys
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(n)/1e3, "cpu-µs/cmd")
		})
	}
}
