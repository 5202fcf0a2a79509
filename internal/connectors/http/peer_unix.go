//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package httpconn

import (
	"net"
	"syscall"
)

// peerDone reports whether an idle connection has anything to read: the
// peer closed it (end of file), reset it, or wrote unasked (a 408 before
// closing). Any of these means a request written on it now would get no
// answer, after leaving: ambiguous where it need not be. One non-blocking
// MSG_PEEK; false when it cannot tell.
func peerDone(c net.Conn) bool {
	if g := guardOf(c); g != nil {
		c = g.Conn // the TCP connection, under TLS too
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	done := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		done = err == nil || (err != syscall.EAGAIN && err != syscall.EWOULDBLOCK && err != syscall.EINTR) || n > 0
		return true // never wait for readability
	})
	return done || err != nil
}
