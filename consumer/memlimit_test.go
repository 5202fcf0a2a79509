package consumer

import "testing"

// TestGoMemoryLimit: the limit serve derives follows the bounds that make
// memory vary, counts Pebble's cache only where it is Go memory, and at
// the defaults leaves room under issue 24's 150 MB of resident memory for
// what is outside the limit (Pebble in a cgo build, the binary's pages).
func TestGoMemoryLimit(t *testing.T) {
	def := GoMemoryLimit(Config{})
	if def > 128<<20 && !pebbleCacheInGoHeap {
		t.Errorf("limit at the defaults %d MiB, want at most 128 MiB", def>>20)
	}
	bigger := []struct {
		name string
		cfg  Config
	}{
		{"max-buffered", Config{MaxBuffered: 2 * defaultMaxBuffered}},
		{"max-fetch-bytes", Config{MaxFetchBytes: 2 * defaultMaxFetchBytes}},
		{"max-concurrent-fetches", Config{MaxConcurrentFetches: 2 * defaultMaxConcurrentFetches}},
	}
	for _, b := range bigger {
		if got := GoMemoryLimit(b.cfg); got <= def {
			t.Errorf("%s doubled: limit %d, not above the default's %d", b.name, got, def)
		}
	}
	// The bytes bound caps what many small commands may hold.
	capped := GoMemoryLimit(Config{MaxBuffered: 1 << 20, MaxBufferedBytes: 1 << 20})
	if want := GoMemoryLimit(Config{MaxBuffered: 1 << 20, MaxBufferedBytes: 2 << 20}); capped >= want {
		t.Errorf("limit with 1 MiB of buffered bytes %d, not below 2 MiB's %d", capped, want)
	}
	cache := GoMemoryLimit(Config{CacheSize: 2 * defaultCacheSize}) - def
	if want := int64(0); pebbleCacheInGoHeap {
		if cache != defaultCacheSize {
			t.Errorf("without cgo, doubling the cache raised the limit by %d, want %d", cache, defaultCacheSize)
		}
	} else if cache != want {
		t.Errorf("with cgo (Pebble's cache in C memory), doubling the cache raised the limit by %d", cache)
	}
	if small := GoMemoryLimit(Config{MaxBuffered: 10, MaxFetchBytes: minFetchBytes}); small < minGoMemoryLimit || !pebbleCacheInGoHeap && small != minGoMemoryLimit {
		t.Errorf("tiny bounds: limit %d, want the floor %d", small, minGoMemoryLimit)
	}
}
