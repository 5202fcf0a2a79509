//go:build linux

package dedupe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/cockroachdb/pebble/v2"
	"runtime"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// BenchmarkLookupDrain is the executor's lookup draining a backlog of new
// keys: each batch of 500 keys is looked up (all absent), then written, as
// the entity workers and the committer do, so the lookups meet the shape
// of a store being drained into (memtables, L0 sublevels, compactions
// under way). cpu-ns/lookup is the CPU time of the lookups' thread, so
// that other processes on the machine do not count.
func BenchmarkLookupDrain(b *testing.B) {
	const perBatch = 500
	const keys = 200_000
	data := json.RawMessage(`{"amount":1250,"currency":"EUR","order":"order-1042","reason":"customer request"}`)
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	key, entity := repeatsKey, repeatsEntity
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Each batch is looked up both ways, in turns first: Lookup, and
	// lookupKey with a new iterator per lookup (as before Lookup reused
	// them).
	var reused, fresh time.Duration
	lookups := 0
	for b.Loop() {
		s, err := Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		for n := 0; n < keys; n += perBatch {
			for turn := range 2 {
				t0 := threadCPU(b)
				for i := n; i < n+perBatch; i++ {
					var ok bool
					var err error
					if (turn+n/perBatch)%2 == 0 {
						_, ok, err = s.Lookup(entity(i), key(i))
					} else {
						_, ok, err = s.lookupKey(s.db, appendRecordKey(nil, entity(i), key(i)))
					}
					if err != nil || ok {
						b.Fatal(ok, err)
					}
				}
				if (turn+n/perBatch)%2 == 0 {
					reused += threadCPU(b) - t0
				} else {
					fresh += threadCPU(b) - t0
				}
			}
			lookups += perBatch
			putDrainRecords(b, s, n, perBatch, data, at)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(reused.Nanoseconds())/float64(lookups), "cpu-ns/lookup")
	b.ReportMetric(float64(fresh.Nanoseconds())/float64(lookups), "cpu-ns/fresh-iter-lookup")
}

// BenchmarkPresenceScan is the scan of the record keys Open runs to fill
// the presence filter (loadPresence), on a store of 500 000 records
// spread over the key space, ingested 4 000 a table as a restore writes
// them: as the writes leave it (many overlapping L0 tables), and
// compacted. cpu-ns/key is its thread's CPU per stored key, and
// scan-ns/key its wall time, which Open adds at every start.
func BenchmarkPresenceScan(b *testing.B) {
	b.Run("tree=as-written", func(b *testing.B) { benchPresenceScan(b, false) })
	b.Run("tree=compacted", func(b *testing.B) { benchPresenceScan(b, true) })
}

func benchPresenceScan(b *testing.B, compacted bool) {
	const keys = 500_000
	const perBatch = 4000
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	key := func(i int) string { return fmt.Sprintf("k-%016x", uint64(i)*0x9E3779B97F4A7C15) }
	dir := b.TempDir()
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	for n := 0; n < keys; n += perBatch {
		batch := s.NewBatch()
		for i := n; i < n+perBatch; i++ {
			r := rec(key(i), fmt.Sprintf("order-%d", i%10000), schemas.StatusSucceeded, int32(i%12))
			r.FinishedAt, r.StartedAt = &at, &at
			batch.PutRecord(r)
		}
		if err := batch.CommitIngest(); err != nil {
			b.Fatal(err)
		}
	}
	if compacted {
		if err := s.db.Compact(context.Background(), []byte{}, []byte{0xff}, true); err != nil {
			b.Fatal(err)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu, wall time.Duration
	scans := 0
	for b.Loop() {
		t0, w0 := threadCPU(b), time.Now()
		p := newPresence(presenceMaxBytes)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: recordSpan.start, UpperBound: recordSpan.end})
		if err != nil {
			b.Fatal(err)
		}
		s.scanPresence(p, it) // on this thread, as the background scan runs it
		if !p.ready.Load() {
			b.Fatal("scan did not finish")
		}
		cpu += threadCPU(b) - t0
		wall += time.Since(w0)
		scans++
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(scans*keys), "cpu-ns/key")
	b.ReportMetric(float64(wall.Nanoseconds())/float64(scans*keys), "scan-ns/key")
}

// BenchmarkLookupRepeats is the executor's lookup draining a backlog of
// repeats: 200 000 records of random keys (~650 bytes each, a noop's
// record with ~200 bytes of data) written in batches of 500 as a drain
// writes them, the store closed and opened again (the repeats' serve is a
// new process), then every key looked up once, with Lookup (the record's
// decode included): order=written in the order the records were written,
// as the repeats of the same backlog arrive; order=random in no order
// (repeats of old keys). flush-block is L0's block size, the value block
// size of the flushes' blob files (flushBlockSize). cpu-ns/lookup is the
// lookups' thread CPU per lookup; reads/lookup the block cache misses per
// lookup (blocks read from disk or the page cache, checked, decompressed).
func BenchmarkLookupRepeats(b *testing.B) {
	for _, order := range []string{"written", "random"} {
		for _, size := range []int{4 << 10, flushBlockSize} {
			b.Run(fmt.Sprintf("order=%s/flush-block=%dKiB", order, size>>10), func(b *testing.B) {
				benchLookupRepeats(b, order == "random", func(s *Settings) { s.flushBlock = size })
			})
		}
	}
}

// The store of the repeats benchmarks: repeatsKeys records of
// repeatsKey(i) and repeatsEntity(i), written in batches of 500 in the
// order of i.
const repeatsKeys = 200_000

func repeatsKey(i int) string    { return fmt.Sprintf("k-%016x", uint64(i)*0x9E3779B97F4A7C15) }
func repeatsEntity(i int) string { return fmt.Sprintf("order-%d", i%10000) }

// putDrainRecords commits one batch of the records repeatsKey(i) for i
// in [from, from+n): succeeded, with data, as the executor writes them.
func putDrainRecords(b *testing.B, s *Store, from, n int, data json.RawMessage, at time.Time) {
	b.Helper()
	batch := s.NewBatch()
	for i := from; i < from+n; i++ {
		r := rec(repeatsKey(i), repeatsEntity(i), schemas.StatusSucceeded, int32(i%12))
		r.Data, r.FinishedAt, r.StartedAt = data, &at, &at
		batch.PutRecord(r)
	}
	if err := batch.Commit(); err != nil {
		b.Fatal(err)
	}
}

// openRepeatsStore writes the repeats benchmarks' store in a new
// directory, closes it, and opens it again, as the repeats' serve does.
func openRepeatsStore(b *testing.B, opts ...Option) *Store {
	const perBatch = 500
	data := json.RawMessage(`{"amount":1250,"currency":"EUR","order":"order-1042","reason":"customer request","note":"` +
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789" + `"}`)
	at := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	dir := b.TempDir()
	s, err := Open(dir, opts...)
	if err != nil {
		b.Fatal(err)
	}
	for n := 0; n < repeatsKeys; n += perBatch {
		putDrainRecords(b, s, n, perBatch, data, at)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if s, err = Open(dir, opts...); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchLookupRepeats(b *testing.B, random bool, opt Option) {
	order := func(i int) int { return i }
	if random {
		order = func(i int) int { return (i * 7919) % repeatsKeys }
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	var misses int64
	lookups := 0
	for b.Loop() {
		b.StopTimer()
		s := openRepeatsStore(b, opt)
		m0 := s.db.Metrics().BlockCache
		b.StartTimer()
		t0 := threadCPU(b)
		for n := range repeatsKeys {
			i := order(n)
			if _, ok, err := s.Lookup(repeatsEntity(i), repeatsKey(i)); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		cpu += threadCPU(b) - t0
		lookups += repeatsKeys
		b.StopTimer()
		misses += s.db.Metrics().BlockCache.Misses - m0.Misses
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(lookups), "cpu-ns/lookup")
	b.ReportMetric(float64(misses)/float64(lookups), "reads/lookup")
}

// BenchmarkLookupRepeatsGet compares, on the store of
// BenchmarkLookupRepeats (order=written), Lookup (SeekPrefixGE on a
// reused iterator with L6 filters) with db.Get (a new get iterator per
// lookup, no L6 filter: a hit in L6 needs none), both decoding the
// record, in turns of 500 keys so that both meet the same tree and cache.
func BenchmarkLookupRepeatsGet(b *testing.B) {
	const perTurn = 500
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var seek, get time.Duration
	for b.Loop() {
		b.StopTimer()
		s := openRepeatsStore(b)
		b.StartTimer()
		for n := 0; n < repeatsKeys; n += perTurn {
			useGet := (n/perTurn)%2 == 1
			t0 := threadCPU(b)
			for i := n; i < n+perTurn; i++ {
				if !useGet {
					if _, ok, err := s.Lookup(repeatsEntity(i), repeatsKey(i)); err != nil || !ok {
						b.Fatal(ok, err)
					}
					continue
				}
				v, closer, err := s.db.Get(appendRecordKey(nil, repeatsEntity(i), repeatsKey(i)))
				if err != nil {
					b.Fatal(err)
				}
				_, err = schemas.UnmarshalRecordKeep(bytes.Clone(v))
				closer.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
			if useGet {
				get += threadCPU(b) - t0
			} else {
				seek += threadCPU(b) - t0
			}
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(seek.Nanoseconds())/float64(b.N*repeatsKeys/2), "cpu-ns/lookup")
	b.ReportMetric(float64(get.Nanoseconds())/float64(b.N*repeatsKeys/2), "cpu-ns/get")
}

// BenchmarkLookupRepeatsPrefetch compares, on the store of
// BenchmarkLookupRepeats, the repeats' lookups one by one (Lookup) with
// a poll's worth of them read ahead in key order (Prefetch) and then
// looked up from what was read (LookupPrefetched), the record's decode
// included both ways, in turns of 500 keys (a poll) so that both meet the
// same tree and cache: order=written as the repeats of a backlog arrive,
// order=random for repeats of old keys in no order.
func BenchmarkLookupRepeatsPrefetch(b *testing.B) {
	for _, order := range []string{"written", "random"} {
		b.Run("order="+order, func(b *testing.B) {
			benchLookupRepeatsPrefetch(b, order == "random")
		})
	}
}

func benchLookupRepeatsPrefetch(b *testing.B, random bool) {
	const perTurn = 500
	order := func(i int) int { return i }
	if random {
		order = func(i int) int { return (i * 7919) % repeatsKeys }
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var one, ahead time.Duration
	keys := make([]PrefetchKey, perTurn)
	pf := make([]Prefetched, perTurn)
	for b.Loop() {
		b.StopTimer()
		s := openRepeatsStore(b)
		b.StartTimer()
		for n := 0; n < repeatsKeys; n += perTurn {
			t0 := threadCPU(b)
			if (n/perTurn)%2 == 0 {
				for i := n; i < n+perTurn; i++ {
					if _, ok, err := s.Lookup(repeatsEntity(order(i)), repeatsKey(order(i))); err != nil || !ok {
						b.Fatal(ok, err)
					}
				}
				one += threadCPU(b) - t0
				continue
			}
			for i := range perTurn {
				keys[i] = PrefetchKey{Entity: repeatsEntity(order(n + i)), Key: repeatsKey(order(n + i))}
			}
			s.Prefetch(keys, pf)
			for i, k := range keys {
				if _, _, ok, err := s.LookupPrefetched(k.Entity, k.Key, &pf[i]); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
			ahead += threadCPU(b) - t0
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(one.Nanoseconds())/float64(b.N*repeatsKeys/2), "cpu-ns/lookup")
	b.ReportMetric(float64(ahead.Nanoseconds())/float64(b.N*repeatsKeys/2), "cpu-ns/prefetched")
}
