package schemas

import "time"

// parseTimeZ reads the JSON string at the start of b when it is a time in
// the one form the encoder writes (time.RFC3339Nano in UTC, as
// internal/wire's appendTime writes it): "YYYY-MM-DDTHH:MM:SS", an
// optional '.' and 1 to 9 digits, 'Z'. It returns the time as
// time.Time.UnmarshalJSON decodes that string (the same value, field for
// field: TestParseTimeZMatchesUnmarshalJSON, FuzzParseTimeZ) and the
// string's length with its quotes. Anything else — another offset, a
// lower-case 'z' or 't', more digits, an escape, a value out of range —
// is not ok, and the caller goes to UnmarshalJSON.
func parseTimeZ(b []byte) (t time.Time, n int, ok bool) {
	const fixed = len(`"2006-01-02T15:04:05`)
	if len(b) < fixed+2 || b[0] != '"' || b[5] != '-' || b[8] != '-' || b[11] != 'T' || b[14] != ':' || b[17] != ':' {
		return time.Time{}, 0, false
	}
	// Two digits at b[i:], and whether both are digits.
	d2 := func(i int) (int, bool) {
		hi, lo := b[i]-'0', b[i+1]-'0'
		return int(hi)*10 + int(lo), hi <= 9 && lo <= 9
	}
	century, ok0 := d2(1)
	yy, ok1 := d2(3)
	month, ok2 := d2(6)
	day, ok3 := d2(9)
	hour, ok4 := d2(12)
	minute, ok5 := d2(15)
	sec, ok6 := d2(18)
	year := century*100 + yy
	if !(ok0 && ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, 0, false
	}
	i, nsec := fixed, 0
	if b[i] == '.' {
		i++
		start := i
		for i < len(b) && i-start < 10 && b[i] >= '0' && b[i] <= '9' {
			nsec = nsec*10 + int(b[i]-'0')
			i++
		}
		nd := i - start
		if nd == 0 || nd > 9 {
			return time.Time{}, 0, false
		}
		for ; nd < 9; nd++ {
			nsec *= 10
		}
	}
	if i+1 >= len(b) || b[i] != 'Z' || b[i+1] != '"' {
		return time.Time{}, 0, false
	}
	// Days since 1970-01-01 of the civil date (Hinnant's days_from_civil),
	// counted from 400 years earlier so that every number stays positive.
	y := year + 400
	if month <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (month + 9) % 12 // March is 0
	doy := (153*mp+2)/5 + day - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	days := int64(era)*146097 + int64(doe) - 719468 - 146097
	unix := days*86400 + int64(hour*3600+minute*60+sec)
	return time.Unix(unix, int64(nsec)).UTC(), i + 2, true
}

// daysIn is the number of days of month m (1–12) in year y.
func daysIn(m, y int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
