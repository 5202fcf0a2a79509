//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package httpconn

import (
	"net"
	"syscall"
)

// peeker looks, without blocking, whether an idle connection has anything
// to read: the peer closed it (end of file), reset it, or wrote unasked (a
// 408 before closing). Any of these means a request written on it now
// would get no answer, after leaving: ambiguous where it need not be.
// Made once per connection (a connection serves one request at a time),
// so that a look allocates nothing.
type peeker struct {
	raw  syscall.RawConn
	fn   func(fd uintptr) bool
	done bool
	b    [1]byte
}

// newPeeker is c's peeker, nil when c has no file descriptor to look at.
func newPeeker(c net.Conn) *peeker {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	p := &peeker{raw: raw}
	p.fn = func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		p.done = n > 0 || err == nil || (err != syscall.EAGAIN && err != syscall.EWOULDBLOCK && err != syscall.EINTR)
		return true // never wait for readability
	}
	return p
}

// peerDone reports whether the connection is done for (one MSG_PEEK);
// false when it cannot tell.
func (p *peeker) peerDone() bool {
	if p == nil {
		return false
	}
	p.done = false
	err := p.raw.Read(p.fn)
	return p.done || err != nil
}
