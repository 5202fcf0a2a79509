// Package faultnet puts network faults between a client and a real server
// in tests: every connection dialed through a Net can be cut (closed, and
// new dials refused) or stalled (reads and writes block) and resumed. Use
// Net.Dial as a client's dialer (kgo.Dialer): the traffic is real TCP to
// the real broker, and the faults hit only that client's connections.
package faultnet

import (
	"context"
	"errors"
	"net"
	"sync"
)

// ErrCut is what dials and I/O return while the network is cut.
var ErrCut = errors.New("faultnet: connection cut")

// Net is a set of connections under one fault switch. The zero value is
// not usable; use New.
type Net struct {
	mu     sync.Mutex
	conns  map[*conn]struct{}
	cut    bool
	resume chan struct{} // closed when no stall is in effect
	dialer net.Dialer
	dials  int
}

// New returns a healthy Net.
func New() *Net {
	r := make(chan struct{})
	close(r)
	return &Net{conns: map[*conn]struct{}{}, resume: r}
}

// Dial connects through the Net (for kgo.Dialer).
func (n *Net) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := n.wait(ctx.Done()); err != nil {
		return nil, err
	}
	c, err := n.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut {
		c.Close()
		return nil, ErrCut
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
	cs := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		cs = append(cs, c)
	}
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

// Resume ends a cut or a stall.
func (n *Net) Resume() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = false
	select {
	case <-n.resume:
	default:
		close(n.resume)
	}
}

// wait blocks while stalled; it fails while cut or once done closes.
func (n *Net) wait(done <-chan struct{}) error {
	n.mu.Lock()
	r, cut := n.resume, n.cut
	n.mu.Unlock()
	if cut {
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

type conn struct {
	net.Conn
	n      *Net
	once   sync.Once
	closed chan struct{}
}

func (c *conn) Read(b []byte) (int, error) {
	if err := c.n.wait(c.closed); err != nil {
		return 0, err
	}
	k, err := c.Conn.Read(b)
	// Data that arrived during a stall is held until it ends.
	if werr := c.n.wait(c.closed); werr != nil {
		return 0, werr
	}
	return k, err
}

func (c *conn) Write(b []byte) (int, error) {
	if err := c.n.wait(c.closed); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
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
