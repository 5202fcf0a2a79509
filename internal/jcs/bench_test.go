package jcs

import (
	"strings"
	"testing"
)

// BenchmarkAppendString prices a record's longest plain member (its
// fingerprint).
func BenchmarkAppendString(b *testing.B) {
	s := "v1:3f8a2c9e0d1b4a5f6e7d8c9b0a1f2e3d4c5b6a798877665544332211ffeeddcc"
	buf := make([]byte, 0, 128)
	for b.Loop() {
		buf = AppendString(buf[:0], s)
	}
}

// BenchmarkIsCanonical prices the check a record's data goes through
// when it is sealed (onceflight-bench's 200 bytes of data).
func BenchmarkIsCanonical(b *testing.B) {
	data := []byte(`{"amount":1,"pad":"` + strings.Repeat("x", 180) + `"}`)
	for b.Loop() {
		if !IsCanonical(data) {
			b.Fatal("not canonical")
		}
	}
}

// BenchmarkCanonicalV1 prices the canonicalization of a command's data
// for its fingerprint.
func BenchmarkCanonicalV1(b *testing.B) {
	data := []byte(`{"amount":1,"pad":"` + strings.Repeat("x", 180) + `"}`)
	for b.Loop() {
		if _, err := CanonicalV1(data, true); err != nil {
			b.Fatal(err)
		}
	}
}
