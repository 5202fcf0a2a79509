package wire

import "time"

// Every record carries three to five times (started_at, finished_at, an
// attempt's at and ended_at, a deadline) and every outcome event one more,
// all in UTC, all in encoding/json's form of a time.Time: RFC 3339 with
// the nanoseconds' trailing zeros trimmed. time.Time.AppendFormat is
// general (a layout, a zone lookup, padded integers) and was about a fifth
// of sealing a record (BENCHMARKS.md, round 10): for the times the
// executor writes, appendTime writes the same bytes by arithmetic alone.

// Seconds since 1970 of 0000-01-01T00:00:00Z and of 10000-01-01T00:00:00Z:
// appendTime writes years of four digits and leaves the others to
// AppendFormat.
const (
	minFastUnix = -62167219200
	maxFastUnix = 253402300800
)

// appendTime appends t as t.AppendFormat(b, time.RFC3339Nano) does,
// byte for byte (TestAppendTimeMatchesFormat, FuzzAppendTime).
func appendTime(b []byte, t time.Time) []byte {
	sec := t.Unix()
	if t.Location() != time.UTC || sec < minFastUnix || sec >= maxFastUnix {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	// Unsigned from here: seconds since 0000-01-01.
	u := uint64(sec - minFastUnix)
	days := u / 86400
	sod := uint32(u - days*86400)
	y, m, d := civil(days)
	var buf [len("2006-01-02T15:04:05.999999999Z")]byte
	put2(buf[0:], y/100)
	put2(buf[2:], y%100)
	buf[4] = '-'
	put2(buf[5:], m)
	buf[7] = '-'
	put2(buf[8:], d)
	buf[10] = 'T'
	put2(buf[11:], sod/3600)
	buf[13] = ':'
	put2(buf[14:], sod/60%60)
	buf[16] = ':'
	put2(buf[17:], sod%60)
	n := 19
	if ns := uint32(t.Nanosecond()); ns != 0 {
		buf[19] = '.'
		put2(buf[20:], ns/1e7)
		put2(buf[22:], ns/1e5%100)
		put2(buf[24:], ns/1e3%100)
		put2(buf[26:], ns/10%100)
		buf[28] = byte('0' + ns%10)
		n = 29
		for buf[n-1] == '0' {
			n--
		}
	}
	buf[n] = 'Z'
	return append(b, buf[:n+1]...)
}

// digitPairs is "00" to "99".
const digitPairs = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" +
	"30313233343536373839" + "40414243444546474849" + "50515253545556575859" +
	"60616263646566676869" + "70717273747576777879" + "80818283848586878889" + "90919293949596979899"

// put2 writes v (below 100) as two digits.
func put2(b []byte, v uint32) {
	b[0], b[1] = digitPairs[2*v], digitPairs[2*v+1]
}

// civil is the proleptic Gregorian date of the day days after
// 0000-01-01, for years 0 to 9999 (Howard Hinnant's civil_from_days,
// counted from 0000-03-01 less one 400-year era so that it stays
// unsigned).
func civil(days uint64) (y, m, d uint32) {
	const jan1ToMar1, era = 60, 146097
	z := days + era - jan1ToMar1
	e := z / era
	doe := z - e*era                                       // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365]
	mp := (5*doy + 2) / 153                                // [0, 11], from March
	d = uint32(doy - (153*mp+2)/5 + 1)
	m = uint32(mp + 3)
	if m > 12 {
		m -= 12
	}
	y = uint32(yoe + e*400 - 400)
	if m <= 2 {
		y++
	}
	return y, m, d
}
