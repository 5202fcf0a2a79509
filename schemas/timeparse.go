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
	num := func(s []byte) (int, bool) {
		x := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			x = x*10 + int(c-'0')
		}
		return x, true
	}
	year, ok1 := num(b[1:5])
	month, ok2 := num(b[6:8])
	day, ok3 := num(b[9:11])
	hour, ok4 := num(b[12:14])
	minute, ok5 := num(b[15:17])
	sec, ok6 := num(b[18:20])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
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
