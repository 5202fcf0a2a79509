//go:build cgo && linux

package cli

/*
#include <malloc.h>

static void onceflight_malloc_arenas(int n) {
#ifdef M_ARENA_MAX
	mallopt(M_ARENA_MAX, n);
#endif
}
*/
import "C"

import "os"

// mallocArenas is the most malloc arenas serve lets glibc create. In a cgo
// build Pebble allocates its block cache and memtables with C's malloc
// from whichever thread runs the goroutine, and glibc gives threads
// arenas of their own (up to 8 per core): blocks evicted from the cache
// leave holes in several arenas that are never returned to the system.
// Measured draining a backlog of 1 000 000 commands: ~70 MB of C memory
// resident for a 64 MiB cache that held far less (BENCHMARKS.md,
// "Round 7 (mem)"); two arenas reuse the holes.
const mallocArenas = 2

// limitMallocArenas applies mallocArenas unless MALLOC_ARENA_MAX, read by
// glibc at start, says otherwise.
func limitMallocArenas() {
	if os.Getenv("MALLOC_ARENA_MAX") != "" {
		return
	}
	C.onceflight_malloc_arenas(mallocArenas)
}
