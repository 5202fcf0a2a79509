package jcs

import "math/bits"

// Strings are most of the bytes a command or a record carries (a data
// member's text, hashes, keys), and nearly all of them are printable
// ASCII without a quote or a backslash: bytes that every form this
// package reads or writes copies as they are. Reading them a byte at a
// time, with four comparisons each, was most of the cost of scanning a
// string (Parser.Str, AppendString, IsCanonical); plainRun skips them
// eight at a time.

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainRun is how many of s's leading bytes are plain: from 0x20 to 0x7f,
// neither '"' nor '\\'.
func plainRun[T ~string | ~[]byte](s T) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		// One bounds check for the word, not eight (the loads are
		// combined into one either way).
		u := s[i : i+8]
		w := uint64(u[0]) | uint64(u[1])<<8 | uint64(u[2])<<16 | uint64(u[3])<<24 |
			uint64(u[4])<<32 | uint64(u[5])<<40 | uint64(u[6])<<48 | uint64(u[7])<<56
		// A byte from 0x80 up, below 0x20, equal to '"' or to '\\' sets
		// its high bit in one of these terms. No test has false
		// negatives, and a false positive is only ever a byte above a
		// true one (a borrow out of that byte's subtraction), so the
		// lowest high bit set is the first byte that is not plain.
		q, bs := w^(ones*'"'), w^(ones*'\\')
		if m := (w | (w - ones*0x20) | ((q - ones) &^ q) | ((bs - ones) &^ bs)) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			break
		}
	}
	return i
}
