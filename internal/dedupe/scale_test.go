package dedupe

import (
	"bufio"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// BenchmarkIndexScale builds a dedupe index of many keys the way a restore
// does (sealed journal records in batches of 1 000, through PutRecordBytes)
// and reports what a user sizing a deployment needs (issue 24, item 7):
// build rate (a restore's index side; reading the journal comes on top),
// disk bytes per key, the process's peak RSS, and lookup latency p50/p99
// for keys that exist (repeats) and keys that do not (new commands). It is
// long, so not part of `make test`:
//
//	make bench-scale                       # 10 000 000 keys
//	make bench-scale SCALE_KEYS=2000000    # a shorter run
//
// Keys are random hex (like UUIDs: no write order to exploit), spread over
// keys/10 entities; each record is a succeeded execution with a small
// result (~500 bytes sealed), the default cache (64 MiB) and memtables.
func BenchmarkIndexScale(b *testing.B) {
	if os.Getenv("ONCEFLIGHT_BENCH_SCALE") == "" {
		b.Skip("minutes long: run by make bench-scale (ONCEFLIGHT_BENCH_SCALE=1), not by make bench")
	}
	n := 10_000_000
	if v := os.Getenv("SCALE_KEYS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("SCALE_KEYS=%q: want a number of keys, at least 1000", v)
		}
	}
	dir := b.TempDir()
	for range b.N {
		s, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		key := func(i int) string { return fmt.Sprintf("%016x", rand.New(rand.NewPCG(uint64(i), 7)).Uint64()) }
		entity := func(i int) string { return "entity-" + strconv.Itoa(i%max(1, n/10)) }

		start := time.Now()
		var sealedBytes int64
		for i := 0; i < n; i += 1000 {
			batch := s.NewBatch()
			for j := i; j < min(i+1000, n); j++ {
				r := rec(key(j), entity(j), schemas.StatusSucceeded, int32(j%12))
				r.Hash = ""
				raw, err := wire.SealRecord(&r)
				if err != nil {
					b.Fatal(err)
				}
				sealedBytes += int64(len(raw))
				batch.PutRecordBytes(r, raw)
			}
			batch.SetProgress(0, Progress{JournalOffset: int64(i + 1000)})
			if err := batch.CommitNoSync(); err != nil {
				b.Fatal(err)
			}
			if i > 0 && i%(n/10) == 0 {
				b.Logf("%d keys, %.0f/s", i, float64(i)/time.Since(start).Seconds())
			}
		}
		if err := s.db.Flush(); err != nil {
			b.Fatal(err)
		}
		built := time.Since(start)
		// Compactions the build left running finish in the background
		// while the index serves; wait for them (at most 2 minutes) so
		// disk use is nearer the steady state, and time it apart.
		// (Pebble's EstimatedDebt need not reach 0: a first run that
		// waited for it stopped at its 10-minute bound.)
		settle := time.Now()
		for s.db.Metrics().Compact.NumInProgress > 0 && time.Since(settle) < 2*time.Minute {
			time.Sleep(100 * time.Millisecond)
		}
		settled := time.Since(settle)
		disk := dirBytes(b, dir)
		tables := s.db.Metrics().Total().TablesSize

		// Lookups: existing keys at random, then absent keys.
		rng := rand.New(rand.NewPCG(1, 2))
		const samples = 200_000
		lat := func(exist bool) (p50, p99 time.Duration) {
			d := make([]time.Duration, samples)
			for k := range d {
				i := rng.IntN(n)
				kk, ee := key(i), entity(i)
				if !exist {
					kk = "absent-" + kk
				}
				t0 := time.Now()
				_, ok, err := s.Lookup(ee, kk)
				d[k] = time.Since(t0)
				if err != nil || ok != exist {
					b.Fatalf("lookup %s/%s: found %v, %v", ee, kk, ok, err)
				}
			}
			slices.Sort(d)
			return d[len(d)/2], d[len(d)*99/100]
		}
		hitP50, hitP99 := lat(true)
		missP50, missP99 := lat(false)
		rss, hwm := procStatus(b)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.Logf("%d keys: built in %s (%.0f keys/s), compactions settled %s later; disk %.1f MB (%.0f B/key; tables %.0f B/key; sealed records %.0f B/key)",
			n, built.Round(time.Millisecond), float64(n)/built.Seconds(), settled.Round(time.Millisecond),
			float64(disk)/1e6, float64(disk)/float64(n), float64(tables)/float64(n), float64(sealedBytes)/float64(n))
		b.Logf("RSS %.0f MB now, %.0f MB peak (VmHWM, whole test process); Go heap in use %.0f MB", float64(rss)/1024, float64(hwm)/1024, float64(ms.HeapInuse)/1e6)
		b.Logf("lookup, existing key: p50 %s p99 %s; absent key: p50 %s p99 %s", hitP50, hitP99, missP50, missP99)
		b.ReportMetric(float64(n)/built.Seconds(), "keys/s")
		b.ReportMetric(float64(disk)/float64(n), "disk_B/key")
		b.ReportMetric(float64(hwm)/1024, "peak_RSS_MB")
		b.ReportMetric(float64(hitP50.Microseconds()), "hit_p50_µs")
		b.ReportMetric(float64(hitP99.Microseconds()), "hit_p99_µs")
		b.ReportMetric(float64(missP50.Microseconds()), "miss_p50_µs")
		b.ReportMetric(float64(missP99.Microseconds()), "miss_p99_µs")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// dirBytes is the size of the files under dir.
func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// procStatus returns VmRSS and VmHWM in KiB.
func procStatus(b *testing.B) (rss, hwm int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb
		case "VmHWM":
			hwm = kb
		}
	}
	return rss, hwm
}
