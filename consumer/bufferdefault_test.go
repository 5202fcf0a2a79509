package consumer

import "testing"

// TestMaxBufferedFollowsMaxInflight: unset, MaxBuffered leaves room for a
// transaction's worth of answers beside every execution MaxInflight lets
// run; set, it is what was given.
func TestMaxBufferedFollowsMaxInflight(t *testing.T) {
	for _, tc := range []struct{ inflight, buffered, want int }{
		{0, 0, defaultMaxBuffered},
		{64, 0, defaultMaxBuffered},
		{512, 0, defaultMaxBuffered},
		{1024, 0, 1024 + defaultMaxBuffered/2},
		{1024, 100, 100},
	} {
		c := Config{MaxInflight: tc.inflight, MaxBuffered: tc.buffered}
		c.setDefaults()
		if c.MaxBuffered != tc.want {
			t.Errorf("MaxInflight %d, MaxBuffered %d: defaults to %d, want %d", tc.inflight, tc.buffered, c.MaxBuffered, tc.want)
		}
	}
}
