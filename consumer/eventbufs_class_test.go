package consumer

import "testing"

// getEventBuf gives a buffer of at least the size asked, from its class
// when one holds it; putEventBuf keeps only the classes' own buffers.
func TestEventBufClasses(t *testing.T) {
	for _, c := range []struct{ n, class int }{
		{0, 0}, {1, 0}, {1024, 0}, {1025, 1}, {2048, 1}, {2049, 2}, {16 << 10, 4}, {16<<10 + 1, -1},
	} {
		if got := eventBufClass(c.n); got != c.class {
			t.Errorf("eventBufClass(%d) = %d, want %d", c.n, got, c.class)
		}
		eb := getEventBuf(c.n)
		if len(eb.b) != 0 || cap(eb.b) < c.n {
			t.Errorf("getEventBuf(%d): len %d cap %d", c.n, len(eb.b), cap(eb.b))
		}
		if c.class >= 0 && cap(eb.b) != 1<<(eventBufMinShift+c.class) {
			t.Errorf("getEventBuf(%d): cap %d, not its class's", c.n, cap(eb.b))
		}
		eb.b = append(eb.b, "x"...)
		putEventBuf(eb)
		if c.class >= 0 && len(eb.b) != 0 {
			t.Errorf("putEventBuf kept %d bytes", len(eb.b))
		}
	}
}
