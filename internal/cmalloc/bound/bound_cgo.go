//go:build cgo && linux

package bound

/*
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define OF_ARENAS 2

__attribute__((constructor)) static void of_bound_arenas(void) {
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
	if (getenv("MALLOC_ARENA_MAX") != NULL) {
		return;
	}
	const char *t = getenv("GLIBC_TUNABLES");
	if (t != NULL && strstr(t, "glibc.malloc.arena_max") != NULL) {
		return;
	}
	mallopt(M_ARENA_MAX, OF_ARENAS);
#endif
}
*/
import "C"

// cArenas is the C side's bound, which the test checks against Arenas.
func cArenas() int { return int(C.OF_ARENAS) }
