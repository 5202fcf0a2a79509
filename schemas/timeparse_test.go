package schemas

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestParseTimeZMatchesUnmarshalJSON: every time the encoder writes
// (RFC3339Nano in UTC, years 0–9999, 0 to 9 fraction digits) is taken by
// the fast path and decodes to what time.Time.UnmarshalJSON gives, field
// for field (wall, ext and location: ==, not Equal); the forms it does not
// take are left to UnmarshalJSON.
func TestParseTimeZMatchesUnmarshalJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 7))
	lo := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	times := []time.Time{
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 2, 29, 12, 0, 0, 1, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2000, 2, 29, 1, 2, 3, 400000000, time.UTC),
		time.Date(2026, 12, 7, 14, 51, 4, 123456789, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
	}
	for range 200000 {
		ns := r.IntN(1e9)
		switch r.IntN(4) { // trailing zeros: fewer fraction digits
		case 0:
			ns = 0
		case 1:
			ns -= ns % 1000000
		case 2:
			ns -= ns % 1000
		}
		times = append(times, time.Unix(lo+r.Int64N(hi-lo+1), int64(ns)).UTC())
	}
	for _, tm := range times {
		b := []byte(`"` + tm.Format(time.RFC3339Nano) + `"`)
		var want time.Time
		if err := want.UnmarshalJSON(b); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		got, n, ok := parseTimeZ(append(b, `,"x":1}`...))
		if !ok || n != len(b) || got != want {
			t.Fatalf("parseTimeZ(%s) = %#v, %d, %v; UnmarshalJSON %#v", b, got, n, ok, want)
		}
	}
	for _, s := range []string{
		`"2026-12-07T14:51:04+01:00"`, `"2026-12-07T14:51:04z"`, `"2026-12-07t14:51:04Z"`,
		`"2026-12-07T14:51:04.1234567891Z"`, `"2026-12-07T14:51:04.Z"`, `"2026-12-07T14:51:04,5Z"`,
		`"2026-12-07T24:00:00Z"`, `"2026-12-07T23:60:00Z"`, `"2026-12-07T23:59:60Z"`, `"1900-02-29T00:00:00Z"`,
		`"2026-04-31T00:00:00Z"`, `"2026-00-01T00:00:00Z"`, `"2026-13-01T00:00:00Z"`, `"2026-12-00T00:00:00Z"`,
		`"\u0032026-12-07T14:51:04Z"`, `"2026-12-07T14:51:04Z`, `"2026-12-07T14:51:04Z\"`, `"2026-12-07T1:51:04Z"`,
		`"+2026-12-07T14:51:04Z"`, `"-026-12-07T14:51:04Z"`, `"2026-12-07 14:51:04Z"`, `null`, `""`, `"`,
	} {
		if _, _, ok := parseTimeZ([]byte(s)); ok {
			t.Errorf("parseTimeZ took %s", s)
		}
	}
}

// FuzzParseTimeZ: whatever the fast path takes, UnmarshalJSON decodes to
// the same time (the fast path is never the only one to accept a string).
func FuzzParseTimeZ(f *testing.F) {
	for _, s := range []string{`"2026-12-07T14:51:04.123456789Z"`, `"2000-02-29T00:00:00Z"`, `"0000-01-01T00:00:00.1Z"`,
		`"2026-12-07T14:51:04+01:00"`, `"1900-02-29T00:00:00Z"`, `"9999-12-31T23:59:59.999999999Z"x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, n, ok := parseTimeZ(b)
		if !ok {
			return
		}
		var want time.Time
		if err := want.UnmarshalJSON(b[:n]); err != nil || got != want {
			t.Fatalf("parseTimeZ(%q) = %#v, %d; UnmarshalJSON %#v, %v", b, got, n, want, err)
		}
	})
}

// BenchmarkParseTime prices one of a record's times (nanoseconds, UTC)
// through the fast path and through UnmarshalJSON (round 17 found a
// parser built on time.Date no faster than the standard library's).
func BenchmarkParseTime(b *testing.B) {
	s := []byte(`"2026-12-07T14:51:04.123456789Z"`)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, _, ok := parseTimeZ(s); !ok {
				b.Fatal(s)
			}
		}
	})
	b.Run("stdlib", func(b *testing.B) {
		var t time.Time
		for b.Loop() {
			if err := t.UnmarshalJSON(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
