package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// gatedProducer produces a stream in the background, never past limit, so
// that the test decides where in the stream its faults land.
type gatedProducer struct {
	sent, limit atomic.Int64
	errc        chan error
	cancel      context.CancelFunc
}

func startProducer(t *testing.T, brokers string, cmds []streamCmd, limit int64) *gatedProducer {
	t.Helper()
	cl := newClient(t, brokers, kgo.ProducerLinger(0))
	ctx, cancel := context.WithCancel(context.Background())
	g := &gatedProducer{errc: make(chan error, 1), cancel: cancel}
	g.limit.Store(limit)
	t.Cleanup(cancel)
	go func() {
		var err error
		for i, c := range cmds {
			for int64(i) >= g.limit.Load() {
				select {
				case <-ctx.Done():
					g.errc <- ctx.Err()
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			err = cl.ProduceSync(pctx, commandRecord(t, c, i)).FirstErr()
			pcancel()
			if err != nil {
				g.errc <- err
				return
			}
			g.sent.Add(1)
			select {
			case <-ctx.Done():
				g.errc <- ctx.Err()
				return
			case <-time.After(15 * time.Millisecond):
			}
		}
		g.errc <- nil
	}()
	return g
}

// wait waits until at least n commands were produced.
func (g *gatedProducer) wait(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for g.sent.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d commands produced", g.sent.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finish lets the producer run to the end and waits for it.
func (g *gatedProducer) finish(t *testing.T, total int) {
	t.Helper()
	g.limit.Store(int64(total))
	select {
	case err := <-g.errc:
		if err != nil {
			t.Fatalf("producer: %v", err)
		}
	case <-time.After(120 * time.Second):
		t.Fatalf("producer did not finish: %d of %d sent", g.sent.Load(), total)
	}
}

// TestKillNineMidStream kills the executor with SIGKILL twice while commands
// stream in, the second time also deleting its local state, and checks that
// every command got one outcome and no key was executed twice.
func TestKillNineMidStream(t *testing.T) {
	brokers := startBroker(t)
	cfg, effects := writeConfig(t)
	opts := serveOpts{brokers: brokers, config: cfg, dataDir: t.TempDir(), executorID: "ex-kill9"}
	serve := startServe(t, opts, true)

	const total = 600
	cmds := planStream("k9", total, 50)
	prod := startProducer(t, brokers, cmds, 200)

	// First kill, about a quarter into the stream.
	prod.wait(t, 150)
	t.Logf("SIGKILL after %d commands produced", prod.sent.Load())
	serve.kill()
	serve = startServe(t, opts, true)

	// Second kill, with the local state deleted: it must be restored
	// from the journal.
	n := prod.sent.Load()
	prod.limit.Store(n + 200)
	prod.wait(t, n+80)
	t.Logf("SIGKILL after %d commands produced; removing the data dir", prod.sent.Load())
	serve.kill()
	if err := os.RemoveAll(opts.dataDir); err != nil {
		t.Fatal(err)
	}
	serve = startServe(t, opts, false)
	prod.finish(t, total)
	t.Logf("all %d commands produced", total)

	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.id
	}
	start := time.Now()
	outs := waitOutcomes(t, brokers, ids, 90*time.Second)
	t.Logf("all outcomes present %s after the last command", time.Since(start).Round(time.Millisecond))
	checkStream(t, cmds, outs, effects, true)
	audit(t, brokers, "e2e")
	if serve.exited() {
		t.Errorf("serve exited: %v", serve.err)
	}
}

// TestGracefulShutdown stops the executor with SIGTERM mid-stream: it must
// exit 0 within 15s, and after a restart every command has exactly one
// outcome and no key was executed twice.
func TestGracefulShutdown(t *testing.T) {
	brokers := startBroker(t)
	cfg, effects := writeConfig(t)
	opts := serveOpts{brokers: brokers, config: cfg, dataDir: t.TempDir(), executorID: "ex-term"}
	serve := startServe(t, opts, true)

	const total = 300
	cmds := planStream("gs", total, 30)
	prod := startProducer(t, brokers, cmds, 180)
	prod.wait(t, 120)

	t.Logf("SIGTERM after %d commands produced", prod.sent.Load())
	start := time.Now()
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-serve.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not exit within 15s of SIGTERM:\n%s", serve.tail(30))
	}
	t.Logf("serve exited %s after SIGTERM: %v", time.Since(start).Round(time.Millisecond), serve.err)
	if serve.err != nil {
		var ee *exec.ExitError
		if errors.As(serve.err, &ee) {
			t.Errorf("serve exit code %d after SIGTERM, want 0:\n%s", ee.ExitCode(), serve.tail(30))
		} else {
			t.Errorf("serve: %v", serve.err)
		}
	}

	startServe(t, opts, false)
	prod.finish(t, total)
	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.id
	}
	outs := waitOutcomes(t, brokers, ids, 90*time.Second)
	checkStream(t, cmds, outs, effects, false)
}
