package wire

import (
	"math/rand/v2"
	"testing"
	"time"
)

// timeCases are times around every boundary appendTime computes: days,
// leap days, centuries, the epoch, the ends of its four-digit years and
// beyond them, nanoseconds with and without trailing zeros, and zones
// other than UTC (left to AppendFormat, whose output it must not change).
func timeCases() []time.Time {
	var ts []time.Time
	for _, y := range []int{-1, 0, 1, 4, 99, 100, 400, 1600, 1899, 1900, 1969, 1970, 1971, 2000, 2024, 2026, 2100, 2400, 9999, 10000, 12345} {
		for _, md := range [][2]int{{1, 1}, {2, 28}, {2, 29}, {3, 1}, {12, 31}} {
			for _, ns := range []int{0, 1, 10, 100000000, 123456789, 999999999, 120000000} {
				ts = append(ts, time.Date(y, time.Month(md[0]), md[1], 0, 0, 0, ns, time.UTC))
				ts = append(ts, time.Date(y, time.Month(md[0]), md[1], 23, 59, 59, ns, time.UTC))
			}
		}
	}
	ts = append(ts, time.Unix(0, 0).UTC(), time.Unix(-1, 0).UTC(), time.Unix(-86400, 1).UTC(), time.Unix(-86401, 0).UTC(),
		time.Unix(minFastUnix, 0).UTC(), time.Unix(minFastUnix-1, 999999999).UTC(), time.Unix(maxFastUnix-1, 999999999).UTC(),
		time.Unix(maxFastUnix, 0).UTC(), time.Time{}, time.Now(), time.Now().UTC(),
		time.Date(2026, 12, 6, 7, 51, 53, 5e8, time.FixedZone("UTC", 0)),
		time.Date(2026, 12, 6, 7, 51, 53, 5e8, time.FixedZone("CET", 3600)),
		time.Date(2026, 12, 6, 7, 51, 53, 5e8, time.FixedZone("", -9000)))
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ts = append(ts, time.Unix(r.Int64N(maxFastUnix-minFastUnix+2*86400)+minFastUnix-86400, r.Int64N(1e9)).UTC())
		ts = append(ts, time.Unix(r.Int64N(4e9), int64(r.IntN(1000))*1e6).UTC())
	}
	return ts
}

// TestAppendTimeMatchesFormat: appendTime writes what AppendFormat with
// RFC3339Nano writes, for every time the cases reach.
func TestAppendTimeMatchesFormat(t *testing.T) {
	for _, tm := range timeCases() {
		want := tm.AppendFormat([]byte("x"), time.RFC3339Nano)
		if got := appendTime([]byte("x"), tm); string(got) != string(want) {
			t.Fatalf("appendTime(%d s, %d ns, %v) = %s, want %s", tm.Unix(), tm.Nanosecond(), tm.Location(), got, want)
		}
	}
}

// FuzzAppendTime: the same for any instant and any fixed zone.
func FuzzAppendTime(f *testing.F) {
	f.Add(int64(0), int64(0), 0)
	f.Add(int64(1796543513), int64(123456789), 0)
	f.Add(int64(minFastUnix), int64(1), 3600)
	f.Add(int64(maxFastUnix-1), int64(999999999), -1)
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int) {
		tm := time.Unix(sec, nsec).UTC()
		if offset != 0 {
			tm = tm.In(time.FixedZone("z", offset%(30*3600)))
		}
		want := tm.AppendFormat(nil, time.RFC3339Nano)
		if got := appendTime(nil, tm); string(got) != string(want) {
			t.Fatalf("appendTime(%d s, %d ns, %v) = %s, want %s", tm.Unix(), tm.Nanosecond(), tm.Location(), got, want)
		}
	})
}

func BenchmarkAppendTime(b *testing.B) {
	tm := time.Date(2026, 12, 6, 7, 51, 53, 123456789, time.UTC)
	buf := make([]byte, 0, 64)
	b.Run("AppendFormat", func(b *testing.B) {
		for b.Loop() {
			buf = tm.AppendFormat(buf[:0], time.RFC3339Nano)
		}
	})
	b.Run("appendTime", func(b *testing.B) {
		for b.Loop() {
			buf = appendTime(buf[:0], tm)
		}
	})
}
