package faultnet

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func TestCutStallResume(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c) //nolint:errcheck // echo
		}
	}()
	n := New()
	ctx := context.Background()
	c, err := n.Dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	echo := func(c net.Conn) error {
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		b := make([]byte, 1)
		_, err := io.ReadFull(c, b)
		return err
	}
	if err := echo(c); err != nil {
		t.Fatal(err)
	}
	n.Stall()
	got := make(chan error, 1)
	go func() { got <- echo(c) }()
	select {
	case err := <-got:
		t.Fatalf("echo during a stall returned %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	n.Resume()
	if err := <-got; err != nil {
		t.Fatalf("echo after resume: %v", err)
	}
	n.Cut()
	if err := echo(c); err == nil {
		t.Fatal("echo on a cut connection succeeded")
	}
	if _, err := n.Dial(ctx, "tcp", ln.Addr().String()); !errors.Is(err, ErrCut) {
		t.Fatalf("dial while cut: %v", err)
	}
	n.Resume()
	c2, err := n.Dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := echo(c2); err != nil {
		t.Fatal(err)
	}
}
