package httpconn

import (
	"errors"
	"net"
	"testing"
	"time"
)

// The guard is what protects a request that was about to be written when
// the process paused: it must refuse the first byte after the deadline.
func TestGuardRefusesWritesAfterDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	g := &guardConn{Conn: a}
	g.arm(time.Now().Add(-time.Nanosecond))
	n, err := g.Write([]byte("POST / HTTP/1.1\r\n"))
	if n != 0 || !errors.Is(err, ErrDeadlinePassed) || g.written.Load() != 0 {
		t.Fatalf("write past deadline: n=%d err=%v written=%d", n, err, g.written.Load())
	}
	g.arm(time.Time{})
	go func() { _, _ = b.Read(make([]byte, 8)) }()
	if n, err := g.Write([]byte("GET")); n != 3 || err != nil || g.written.Load() != 3 {
		t.Fatalf("write without deadline: n=%d err=%v", n, err)
	}
}
