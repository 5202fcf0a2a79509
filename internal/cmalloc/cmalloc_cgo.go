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

// of_trim returns the free pages of every arena to the system (1 if any
// was).
static int of_trim(void) {
#ifdef __GLIBC__
	return malloc_trim(0);
#else
	return 0;
#endif
}

static int of_glibc(void) {
#ifdef __GLIBC__
	return 1;
#else
	return 0;
#endif
}

// of_fragment allocates n blocks of size bytes, touched, and frees all but
// every keep-th: the holes glibc keeps between live blocks. It returns the
// blocks kept (n/keep of them, in out) for of_release.
static void of_fragment(size_t n, size_t size, size_t keep, void **out) {
	void **all = malloc(n * sizeof(void *));
	if (all == NULL) {
		return;
	}
	for (size_t i = 0; i < n; i++) {
		all[i] = malloc(size);
		if (all[i] != NULL) {
			memset(all[i], 1, size);
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (i % keep == 0) {
			out[i / keep] = all[i];
		} else {
			free(all[i]);
		}
	}
	free(all);
}

static void of_release(size_t n, void **kept) {
	for (size_t i = 0; i < n; i++) {
		free(kept[i]);
	}
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

import "unsafe"

func arenas() int { return int(C.of_arenas()) }

// touch allocates and frees size bytes of C memory on the calling thread,
// which makes glibc pick that thread's arena.
func touch(size int) { C.of_touch(C.size_t(size)) }

func trim() bool { return C.of_trim() == 1 }

func trimmable() bool { return C.of_glibc() == 1 }

// fragment leaves size×n bytes of C memory with holes: all but every
// keep-th block freed. The returned func frees the rest. Tests use it.
func fragment(n, size, keep int) func() {
	kept := make([]unsafe.Pointer, n/keep+1)
	C.of_fragment(C.size_t(n), C.size_t(size), C.size_t(keep), (*unsafe.Pointer)(unsafe.Pointer(&kept[0])))
	return func() {
		C.of_release(C.size_t(len(kept)), (*unsafe.Pointer)(unsafe.Pointer(&kept[0])))
	}
}
