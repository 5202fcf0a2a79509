package cmalloc

import (
	"os"
	"testing"
)

// TestThreadsMakeArenas: without a bound, eight threads allocating at once
// leave more arenas than package bound allows (2). It shows that bound's
// test, which runs the same load, can tell a bound from none.
func TestThreadsMakeArenas(t *testing.T) {
	if os.Getenv("MALLOC_ARENA_MAX") != "" || os.Getenv("GLIBC_TUNABLES") != "" {
		t.Skip("the environment sets glibc's malloc bounds")
	}
	before := Arenas()
	if before < 0 {
		t.Skip("not glibc with cgo: no arenas to count")
	}
	AllocateOnThreads(8)
	if got := Arenas(); got <= 2 {
		t.Errorf("%d arenas after 8 threads allocated (%d before): the load does not make arenas", got, before)
	}
}
