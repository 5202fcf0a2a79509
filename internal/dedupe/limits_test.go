package dedupe

import (
	"strings"
	"testing"
)

// The memory the index may use is stated at Open and reported back (the
// executor exports it as onceflight_memory_limit); sizes that cannot work
// are refused with the option's name, not left to Pebble's defaults.
func TestOpenLimits(t *testing.T) {
	s, err := Open(t.TempDir(), WithCacheSize(32<<20), WithMemTableSize(2<<20), WithEntryCache(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := Limits{CacheBytes: 32 << 20, MemTableBytes: memTables * 2 << 20, EntryCacheEntries: 4 * 4096, PresenceBytes: presenceMaxBytes}
	if got := s.Limits(); got != want {
		t.Fatalf("limits %+v, want %+v", got, want)
	}
	if s.entities.max != 4096 || s.metas.max != 4096 {
		t.Fatalf("entry caches of %d and %d entries per generation, want 4096", s.entities.max, s.metas.max)
	}

	d := openTest(t, t.TempDir()).Limits()
	if d.CacheBytes != DefaultCacheSize || d.MemTableBytes != memTables*DefaultMemTableSize || d.EntryCacheEntries != 4*DefaultEntryCacheEntries {
		t.Fatalf("default limits %+v", d)
	}

	for _, c := range []struct {
		opt  Option
		want string
	}{
		{WithMemTableSize(1 << 10), "memtable size"},
		{WithEntryCache(10), "entry cache"},
	} {
		if _, err := Open(t.TempDir(), c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open: error %v, want one naming %q", err, c.want)
		}
	}
}
