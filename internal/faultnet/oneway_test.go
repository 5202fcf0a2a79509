package faultnet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// server accepts connections and hands the server side of each to the test.
func server(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			ch <- c
		}
	}()
	return ln.Addr().String(), ch
}

func dialPair(t *testing.T, n *Net, addr string, accepted <-chan net.Conn) (client, srv net.Conn) {
	t.Helper()
	c, err := n.Dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	select {
	case s := <-accepted:
		return c, s
	case <-time.After(10 * time.Second):
		t.Fatal("no accept")
	}
	return nil, nil
}

// nothingWithin reads c for d and fails if any byte arrives.
func nothingWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{}) //nolint:errcheck // reset
	b := make([]byte, 16)
	k, err := c.Read(b)
	if k > 0 {
		t.Fatalf("%s: %q arrived through a blackhole", what, b[:k])
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %v, want the deadline", what, err)
	}
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{}) //nolint:errcheck // reset
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBlackholeOutLosesWritesOnlyAndResetsOnHeal(t *testing.T) {
	addr, acc := server(t)
	n := New()
	c, s := dialPair(t, n, addr, acc)
	idle, idleSrv := dialPair(t, n, addr, acc) // loses nothing: survives the heal

	n.Blackhole(Out)
	if k, err := c.Write([]byte("lost")); k != 4 || err != nil {
		t.Fatalf("write into the blackhole: %d %v, want success", k, err)
	}
	nothingWithin(t, s, 100*time.Millisecond, "client → server")
	if _, err := s.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 2); string(got) != "ok" {
		t.Fatalf("server → client during an out blackhole: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := n.Dial(ctx, "tcp", addr); err == nil {
		t.Fatal("dial through a blackhole succeeded")
	}
	if got := n.Swallowed(Out); got != 4 {
		t.Fatalf("swallowed out %d, want 4", got)
	}

	n.Resume()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection that lost bytes was not reset on heal")
	}
	if _, err := idle.Write([]byte("x")); err != nil {
		t.Fatalf("idle connection after heal: %v", err)
	}
	if got := readN(t, idleSrv, 1); string(got) != "x" {
		t.Fatalf("idle after heal: %q", got)
	}
	c2, s2 := dialPair(t, n, addr, acc)
	if _, err := c2.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, s2, 1); string(got) != "y" {
		t.Fatalf("new connection after heal: %q", got)
	}
}

func TestBlackholeInLosesReadsOnlyAndResetsOnHeal(t *testing.T) {
	addr, acc := server(t)
	n := New()
	c, s := dialPair(t, n, addr, acc)

	n.Blackhole(In)
	if _, err := c.Write([]byte("req")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, s, 3); string(got) != "req" {
		t.Fatalf("client → server during an in blackhole: %q", got)
	}
	if _, err := s.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	nothingWithin(t, c, 200*time.Millisecond, "server → client")
	if got := n.Swallowed(In); got != 6 {
		t.Fatalf("swallowed in %d, want 6", got)
	}
	n.Resume()
	if _, err := c.Write([]byte("z")); err == nil {
		t.Fatal("a connection that lost bytes was not reset on heal")
	}
}

func TestLatencyDelaysEveryWriteInOrder(t *testing.T) {
	addr, acc := server(t)
	n := New()
	c, s := dialPair(t, n, addr, acc)
	const d = 150 * time.Millisecond
	n.SetLatency(d)
	start := time.Now()
	var want []byte
	for i := range 20 {
		b := []byte{byte('a' + i)}
		want = append(want, b...)
		if k, err := c.Write(b); k != 1 || err != nil {
			t.Fatalf("write %d: %d %v", i, k, err)
		}
	}
	got := readN(t, s, len(want))
	if el := time.Since(start); el < d {
		t.Fatalf("bytes arrived after %s, before the added latency %s", el, d)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("delayed writes reordered: %q, want %q", got, want)
	}
	// Back to no latency: later writes still queue behind earlier ones.
	n.SetLatency(0)
	if _, err := c.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, s, 1); string(got) != "!" {
		t.Fatalf("after latency: %q", got)
	}
	// The server's answers are not delayed, and closing stops the queue.
	c.Close()
	if _, err := c.Write([]byte("?")); err == nil {
		t.Fatal("write after close succeeded")
	}
}

// Clients retry network errors by their type: a cut must fail like a real
// network does (a *net.OpError dial error; ECONNRESET on a connection),
// or a client takes it for a hard failure.
func TestErrorsLookLikeTheNetwork(t *testing.T) {
	addr, acc := server(t)
	n := New()
	c, _ := dialPair(t, n, addr, acc)
	n.Cut()
	_, err := n.Dial(context.Background(), "tcp", addr)
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "dial" || !errors.Is(err, ErrCut) {
		t.Fatalf("dial while cut: %#v, want a *net.OpError dial error wrapping ErrCut", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read on a cut connection: %v, want ECONNRESET", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("write on a cut connection: %v, want ECONNRESET", err)
	}
	n.Resume()
	n.Blackhole(Out)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = n.Dial(ctx, "tcp", addr)
	if !errors.As(err, &oe) || oe.Op != "dial" || !oe.Timeout() {
		t.Fatalf("dial through a blackhole: %#v, want a dial timeout", err)
	}
}
