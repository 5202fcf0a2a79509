//go:build cgo && linux

package cmalloc

/*
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

// of_arenas counts the "<heap nr=" elements of malloc_info's report: one
// per arena.
static int of_arenas(void) {
#ifdef __GLIBC__
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f == NULL) {
		return -1;
	}
	if (malloc_info(0, f) != 0) {
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	int n = 0;
	for (char *p = buf; (p = strstr(p, "<heap nr=")) != NULL; p++) {
		n++;
	}
	free(buf);
	return n;
#else
	return -1;
#endif
}

static void of_touch(size_t size) {
	void *p = malloc(size);
	if (p != NULL) {
		memset(p, 1, size);
	}
	free(p);
}
*/
import "C"

func arenas() int { return int(C.of_arenas()) }

// touch allocates and frees size bytes of C memory on the calling thread,
// which makes glibc pick that thread's arena.
func touch(size int) { C.of_touch(C.size_t(size)) }
