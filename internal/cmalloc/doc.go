// Package cmalloc reports on the C allocator's per-thread arenas in a cgo
// build, and gives back the free pages they hold (Trimmer); package bound
// limits them.
//
// Pebble's block cache and memtables are C memory when the binary is built
// with cgo (the default on Linux). glibc gives every thread that calls
// malloc an arena of its own, up to 8 per core, and an arena keeps the
// high-water mark of what its thread once held: the cache's blocks are
// allocated by whichever of the Go runtime's threads runs the read, so
// their memory is spread over many arenas, each holding free pages between
// live blocks. Draining 100 000 repeats (every lookup reads a block) the
// executor's peak RSS was 187 MB with glibc's default and 159 MB with two
// arenas, for the same CPU per command (BENCHMARKS.md, "Round 10
// (arenas)").
//
// Outside glibc (musl, other systems, CGO_ENABLED=0) there are no such
// arenas and Arenas reports -1.
package cmalloc

import (
	"runtime"
	"sync"
)

// Arenas returns the number of arenas glibc has created, or -1 where it
// cannot tell (outside glibc, without cgo). serve logs it at start.
func Arenas() int { return arenas() }

// AllocateOnThreads has n goroutines, each locked to an OS thread of its
// own and all alive at once, allocate and free C memory: the load that
// makes glibc create arenas. Tests use it.
func AllocateOnThreads(n int) {
	var started, done sync.WaitGroup
	release := make(chan struct{})
	started.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			touch(64 << 10)
			started.Done()
			<-release
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
}
