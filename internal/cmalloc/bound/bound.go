// Package bound limits glibc's malloc arenas to Arenas before the Go
// runtime starts, unless the operator set a bound (MALLOC_ARENA_MAX, or
// glibc.malloc.arena_max in GLIBC_TUNABLES). Import it for its effect,
// from a main package only:
//
//	import _ "github.com/onceflight/onceflight/internal/cmalloc/bound"
//
// Why bound them: see package cmalloc. Why this early: a thread keeps the
// arena it first got, and by the time any Go code runs the runtime has
// started threads that allocate (five arenas in a test binary), so a bound
// set from Go leaves those; an ELF constructor runs before them. Two, not
// one, so that threads allocating at once still have a second lock to
// take; an operator who wants glibc's default sets MALLOC_ARENA_MAX.
package bound

// Arenas is the bound: OF_ARENAS in bound_cgo.go.
const Arenas = 2
