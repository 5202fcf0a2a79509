package dedupe

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func BenchmarkZZDebug(b *testing.B) {
	for _, cache := range []int64{8 << 20, 64 << 20} {
		s, _ := Open(b.TempDir(), WithCacheSize(cache))
		fillForBench(b, s)
		m0 := s.db.Metrics()
		fmt.Printf("cache=%d L6 tables=%d size=%d\n", cache>>20, m0.Levels[6].TablesCount, m0.Levels[6].TablesSize)
		for _, mode := range []string{"lookup", "rawiter", "rawiterNoL6", "get"} {
			h0, mi0 := s.db.Metrics().BlockCache.Hits, s.db.Metrics().BlockCache.Misses
			n := 100000
			st := time.Now()
			for i := 0; i < n; i++ {
				k := recordKey(fmt.Sprintf("key-%08d", 2*(i%benchKeys)+1))
				switch mode {
				case "lookup":
					s.Lookup(string(k[2:]))
				case "rawiter", "rawiterNoL6":
					it, _ := s.db.NewIter(&pebble.IterOptions{UseL6Filters: mode == "rawiter"})
					it.SeekPrefixGE(k)
					it.Close()
				case "get":
					_, c, err := s.db.Get(k)
					if err == nil {
						c.Close()
					}
				}
			}
			m := s.db.Metrics()
			fmt.Printf("  %s %v/op hits=%d misses=%d\n", mode, time.Since(st)/time.Duration(n), m.BlockCache.Hits-h0, m.BlockCache.Misses-mi0)
		}
		s.Close()
	}
}
