// Package faultnet puts network faults between a client and a real server
// in tests: every connection dialed through a Net can be cut (closed, and
// new dials refused), stalled (reads and writes block), blackholed one way
// (bytes in one direction silently lost while the other still flows) or
// slowed (every write delayed), and healed. Use Net.Dial as a client's
// dialer (kgo.Dialer): the traffic is real TCP to the real server, and the
// faults hit only that client's connections.
package faultnet

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrCut is what a dial fails with while the network is cut, wrapped in a
// *net.OpError (Op "dial") as a real refused dial is: clients tell network
// errors, which they retry, from others by that type (kgo drops a group
// session on a dial error that is not one). I/O on a cut or reset
// connection fails with ECONNRESET, also as a *net.OpError.
var ErrCut = errors.New("faultnet: connection cut")

func dialErr(network, addr string, err error) error {
	return &net.OpError{Op: "dial", Net: network, Addr: strAddr(addr), Err: err}
}

type strAddr string

func (a strAddr) Network() string { return "tcp" }
func (a strAddr) String() string  { return string(a) }

// resetErr is what a read or write on a cut connection returns.
func resetErr(op string) error {
	return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, syscall.ECONNRESET)}
}

// Direction is one way of a connection, seen from the client that dialed.
type Direction int

const (
	// Out is client → server: what the client writes.
	Out Direction = iota
	// In is server → client: what the client reads.
	In
)

func (d Direction) String() string {
	if d == Out {
		return "out"
	}
	return "in"
}

// Net is a set of connections under one fault switch. The zero value is
// not usable; use New.
type Net struct {
	// mu guards the fields below, but for dialer (never changed) and
	// lost (atomic). A leaf lock.
	mu     sync.Mutex
	conns  map[*conn]struct{}
	cut    bool
	resume chan struct{} // closed when no stall is in effect
	open   chan struct{} // closed when no blackhole is in effect
	hole   [2]bool       // by Direction
	delay  time.Duration // added to every write
	dialer net.Dialer
	dials  int
	lost   [2]atomic.Int64 // bytes swallowed, by Direction
}

// New returns a healthy Net.
func New() *Net {
	r, o := make(chan struct{}), make(chan struct{})
	close(r)
	close(o)
	return &Net{conns: map[*conn]struct{}{}, resume: r, open: o}
}

// Dial connects through the Net (for kgo.Dialer). It waits while the
// network is stalled or blackholed either way (a handshake needs both
// ways) and fails while it is cut.
func (n *Net) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := n.waitOpen(ctx.Done()); err != nil {
		if ctx.Err() != nil { // a handshake that never completed: a dial timeout
			err = ctx.Err()
		}
		return nil, dialErr(network, addr, err)
	}
	c, err := n.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut {
		c.Close()
		return nil, dialErr(network, addr, ErrCut)
	}
	n.dials++
	fc := &conn{Conn: c, n: n, closed: make(chan struct{})}
	n.conns[fc] = struct{}{}
	return fc, nil
}

// Dials counts the connections made so far.
func (n *Net) Dials() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dials
}

// Cut closes every connection and refuses new ones until Resume.
func (n *Net) Cut() {
	n.mu.Lock()
	n.cut = true
	cs := n.connsLocked(func(*conn) bool { return true })
	n.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Stall blocks every read, write and dial (connections stay open) until
// Resume: a network that drops everything without a reset.
func (n *Net) Stall() {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.resume:
		n.resume = make(chan struct{})
	default: // already stalled
	}
}

// Blackhole loses every byte going direction d until Resume, while the
// other direction still flows: with Out the client's writes report
// success and never reach the server (which still answers what it
// already had); with In the server receives and acts on everything the
// client sends, and every answer is lost. New dials wait. A connection
// that lost bytes has a broken stream, so Resume resets it (as TCP would
// once its retransmissions ran out); connections that lost nothing stay.
func (n *Net) Blackhole(d Direction) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hole[d] = true
	select {
	case <-n.open:
		n.open = make(chan struct{})
	default:
	}
}

// Swallowed counts the bytes lost to blackholes in direction d so far.
func (n *Net) Swallowed(d Direction) int64 { return n.lost[d].Load() }

// SetLatency delays every write by d from now on (0 ends it): each write's
// bytes reach the server d after the client wrote them, without blocking
// the writer, in order. A request/response round trip grows by d, as with
// d/2 added each way.
func (n *Net) SetLatency(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
}

// Resume ends a cut, a stall and blackholes (not latency), resetting the
// connections that lost bytes to a blackhole.
func (n *Net) Resume() {
	n.mu.Lock()
	n.cut = false
	n.hole = [2]bool{}
	select {
	case <-n.resume:
	default:
		close(n.resume)
	}
	select {
	case <-n.open:
	default:
		close(n.open)
	}
	cs := n.connsLocked(func(c *conn) bool { return c.lost.Load() })
	n.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (n *Net) connsLocked(keep func(*conn) bool) []*conn {
	var cs []*conn
	for c := range n.conns {
		if keep(c) {
			cs = append(cs, c)
		}
	}
	return cs
}

// wait blocks while stalled; it fails while cut or once done closes.
func (n *Net) wait(done <-chan struct{}) error {
	n.mu.Lock()
	r, cut := n.resume, n.cut
	n.mu.Unlock()
	if cut || isClosed(done) { // a closed connection fails even when not stalled
		return ErrCut
	}
	select {
	case <-r:
	case <-done:
		return ErrCut
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut {
		return ErrCut
	}
	return nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitOpen is wait, also blocking while a blackhole is in effect.
func (n *Net) waitOpen(done <-chan struct{}) error {
	for {
		if err := n.wait(done); err != nil {
			return err
		}
		n.mu.Lock()
		o := n.open
		n.mu.Unlock()
		select {
		case <-o:
			return n.wait(done)
		case <-done:
			return ErrCut
		}
	}
}

// state is what applies to one write or read now.
func (n *Net) state(d Direction) (hole bool, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hole[d], n.delay
}

type conn struct {
	net.Conn
	n      *Net
	once   sync.Once
	closed chan struct{}
	lost   atomic.Bool // a blackhole swallowed some of its bytes

	// mu guards line and werr. A leaf lock.
	mu   sync.Mutex
	line chan chunk // delayed writes, once latency was first in effect
	werr error      // the first failed delayed write
}

type chunk struct {
	b   []byte
	due time.Time
}

func (c *conn) Read(b []byte) (int, error) {
	for {
		if err := c.n.wait(c.closed); err != nil {
			return 0, resetErr("read")
		}
		k, err := c.Conn.Read(b)
		// Data that arrived during a stall is held until it ends.
		if werr := c.n.wait(c.closed); werr != nil {
			return 0, resetErr("read")
		}
		if hole, _ := c.n.state(In); hole && k > 0 {
			c.lost.Store(true)
			c.n.lost[In].Add(int64(k))
			if err != nil {
				return 0, err
			}
			continue
		}
		return k, err
	}
}

func (c *conn) Write(b []byte) (int, error) {
	if err := c.n.wait(c.closed); err != nil {
		return 0, resetErr("write")
	}
	hole, delay := c.n.state(Out)
	if hole {
		c.lost.Store(true)
		c.n.lost[Out].Add(int64(len(b)))
		return len(b), nil
	}
	c.mu.Lock()
	if c.line == nil && delay > 0 {
		c.line = make(chan chunk, 256)
		go c.pump()
	}
	line, werr := c.line, c.werr
	c.mu.Unlock()
	if werr != nil {
		return 0, werr
	}
	if line == nil {
		return c.Conn.Write(b)
	}
	// Once delayed, every later write queues too, so none overtakes.
	ch := chunk{b: append([]byte(nil), b...), due: time.Now().Add(delay)}
	if isClosed(c.closed) {
		return 0, net.ErrClosed
	}
	select {
	case line <- ch:
		return len(b), nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

// pump writes the delayed chunks, each at its due time.
func (c *conn) pump() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		var ch chunk
		select {
		case ch = <-c.line:
		case <-c.closed:
			return
		}
		if d := time.Until(ch.due); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-c.closed:
				return
			}
		}
		if _, err := c.Conn.Write(ch.b); err != nil {
			c.mu.Lock()
			c.werr = err
			c.mu.Unlock()
			c.Close()
			return
		}
	}
}

func (c *conn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.n.mu.Lock()
		delete(c.n.conns, c)
		c.n.mu.Unlock()
	})
	return c.Conn.Close()
}
