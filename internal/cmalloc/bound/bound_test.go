package bound

import (
	"os"
	"testing"

	"github.com/onceflight/onceflight/internal/cmalloc"
)

// TestBoundHolds: with this package linked, eight threads allocating at
// once leave at most Arenas arenas. cmalloc's TestThreadsMakeArenas shows
// the same load makes more without it.
func TestBoundHolds(t *testing.T) {
	if os.Getenv("MALLOC_ARENA_MAX") != "" || os.Getenv("GLIBC_TUNABLES") != "" {
		t.Skip("the environment sets glibc's malloc bounds: ours is not applied")
	}
	if cmalloc.Arenas() < 0 {
		t.Skip("not glibc with cgo: nothing to bound")
	}
	cmalloc.AllocateOnThreads(8)
	if got := cmalloc.Arenas(); got > Arenas {
		t.Errorf("%d arenas after 8 threads allocated, want at most %d", got, Arenas)
	}
}
