//go:build !cgo || !linux

package cmalloc

func arenas() int { return -1 }

func touch(int) {}

func trim() bool { return false }

func trimmable() bool { return false }

func fragment(int, int, int) func() { return func() {} }
