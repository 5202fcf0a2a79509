package consumer_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/diskfault"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/internal/testlog"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestFaultDisk: Pebble's disk starts failing every write and sync (an I/O
// error; out of space) under a running executor A. A must stop taking work
// for good — not answer from an index it could not update — and say so in
// /readyz (NotReady), onceflight_store_failed and the log, and leave its
// group so B takes the partitions over and answers what A could not. A
// restarted on the same data dir, on a healthy disk, restores from the
// journal: every command answered once, no effect done twice, audit passes.
func TestFaultDisk(t *testing.T) {
	for _, kind := range []string{"EIO", "ENOSPC"} {
		t.Run(kind, func(t *testing.T) {
			var inject error // nil: an I/O error
			if kind == "ENOSPC" {
				inject = syscall.ENOSPC
			}
			h := onceflighttest.New(t)
			h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 500ms\n", h.Effects))
			disk := diskfault.New(inject)
			var logs testlog.Buffer
			tune := func(c *consumer.Config) {
				c.SessionTimeout = 2 * time.Second
				c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelWarn})).With("executor", "A")
			}
			dirA := t.TempDir()
			a := h.StartNode("A", dirA, onceflighttest.NodeOptions{Tune: tune, KafkaOpts: kafkatest.ShortHeartbeats, ExecutorOpts: []consumer.Option{consumer.WithStoreOptions(func(s *dedupe.Settings) { s.FS = disk.FS })}})
			onceflighttest.WaitFor(t, 20*time.Second, "A owns every partition", func() bool { return a.Owns(3) })

			var ids []string
			submit := func(tag string, k int) {
				for i := range k {
					id := fmt.Sprintf("%s%d", tag, i)
					ids = append(ids, id)
					h.Submit(id, fmt.Sprintf("order-%d", i%3), "k-"+id, `{}`)
				}
			}
			submit("ok", 3)
			seen := map[string][]schemas.Outcome{}
			h.Outcomes(len(ids), seen, nil)

			disk.Fail()
			submit("bad", 3)
			onceflighttest.WaitFor(t, 20*time.Second, "A reports its failed index", func() bool {
				v, _ := kafkatest.Gauge(t, a.Reg, "onceflight_store_failed")
				return v == 1
			})
			if a.Ex.Ready() {
				t.Error("A is ready on a failed index")
			}
			if r := a.Ex.NotReady(); !strings.Contains(r, "dedupe index failed") || !strings.Contains(r, "restart on a healthy disk") {
				t.Errorf("A's readyz reason %q does not say its index failed", r)
			}
			if v, _ := kafkatest.Gauge(t, a.Reg, "onceflight_ready"); v != 0 {
				t.Errorf("onceflight_ready = %v on a failed index", v)
			}
			if l := logs.String(); !strings.Contains(l, "dedupe index failed") {
				t.Errorf("no ERROR line names the failed index:\n%s", l)
			}
			onceflighttest.WaitFor(t, 20*time.Second, "A leaves the group", func() bool { return len(a.Ex.Owned()) == 0 })
			t.Logf("A stopped: %s", a.Ex.NotReady())

			// B answers what A could not.
			b := h.StartNode("B", t.TempDir(), onceflighttest.NodeOptions{KafkaOpts: kafkatest.ShortHeartbeats})
			h.Outcomes(len(ids), seen, nil)
			if err := b.Stop(); err != nil {
				t.Errorf("B: %v", err)
			}
			if err := a.Stop(); err != nil {
				t.Errorf("A's Run on a failed index returned %v, want nil once stopped", err)
			}

			// A again, same data dir, healthy disk: restores from the
			// journal, then answers new commands and repeats.
			disk.Heal()
			a2 := h.StartNode("A", dirA, onceflighttest.NodeOptions{})
			submit("after", 3)
			for _, id := range []string{"ok0", "bad0"} {
				h.Submit("again-"+id, "order-0", "k-"+id, `{}`)
			}
			h.Outcomes(len(ids)+2, seen, nil)
			if err := a2.Stop(); err != nil {
				t.Errorf("A restarted: %v", err)
			}

			all := h.AllOutcomes()
			kafkatest.OneOutcomeEach(t, all, ids)
			effects := h.EffectCount()
			for _, id := range ids {
				if s := all[id][0].Record.Status; s != schemas.StatusSucceeded {
					t.Errorf("%s: %s", id, s)
				}
				if effects["k-"+id] != 1 {
					t.Errorf("k-%s took effect %d times, want 1", id, effects["k-"+id])
				}
			}
			for _, id := range []string{"again-ok0", "again-bad0"} {
				if len(all[id]) != 1 || !all[id][0].Replayed {
					t.Errorf("%s: %+v, want one replayed outcome", id, all[id])
				}
			}
			h.Audit()
		})
	}
}

// TestFaultCorruptDataDir: A answers, stops, and its index's MANIFEST is
// destroyed. Restarted (as serve opens it, WithRebuildOnCorruption) it
// moves the directory aside with a WARN, restores from the journal, and
// answers the old keys from their records: nothing executed twice.
func TestFaultCorruptDataDir(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 500ms\n", h.Effects))
	dir := filepath.Join(t.TempDir(), "state")
	a := h.StartNode("A", dir, onceflighttest.NodeOptions{})
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		h.Submit(id, fmt.Sprintf("order-%d", i%3), "k-"+id, `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(len(ids), seen, nil)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	manifests, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no MANIFEST to damage")
	}
	for _, m := range manifests {
		if err := os.Truncate(m, 0); err != nil {
			t.Fatal(err)
		}
	}
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelWarn}))
	a = h.StartNode("A", dir, onceflighttest.NodeOptions{Tune: func(c *consumer.Config) { c.Logger = log }})
	for _, id := range ids {
		h.Submit("again-"+id, seen[id][0].Record.Entity, "k-"+id, `{}`)
	}
	h.Outcomes(2*len(ids), seen, nil)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "moved_to=") || !strings.Contains(l, "malformed manifest") {
		t.Errorf("no WARN naming the damage and where it went:\n%s", l)
	}
	all := h.AllOutcomes()
	effects := h.EffectCount()
	for _, id := range ids {
		if o := all["again-"+id]; len(o) != 1 || !o[0].Replayed || o[0].Record.Status != schemas.StatusSucceeded {
			t.Errorf("again-%s: %+v, want one replayed success", id, o)
		}
		if effects["k-"+id] != 1 {
			t.Errorf("k-%s took effect %d times, want 1", id, effects["k-"+id])
		}
	}
	h.Audit()
}

// TestFaultDiskWhileIdle: the write that fails is not a command's (a
// prune, here a batch the test commits on A's store) and no command
// follows. A must still stop at once — not ready, leaving its group —
// rather than at its next command, which on a quiet partition could be
// hours away while its index already lacks what the journal has.
func TestFaultDiskWhileIdle(t *testing.T) {
	h := onceflighttest.New(t)
	disk := diskfault.New(nil)
	tune := func(c *consumer.Config) { c.SessionTimeout = 2 * time.Second }
	a := h.StartNode("A", t.TempDir(), onceflighttest.NodeOptions{Tune: tune, KafkaOpts: kafkatest.ShortHeartbeats, ExecutorOpts: []consumer.Option{consumer.WithStoreOptions(func(s *dedupe.Settings) { s.FS = disk.FS })}})
	onceflighttest.WaitFor(t, 20*time.Second, "A owns every partition", func() bool { return a.Owns(3) })
	disk.Fail()
	b := storeof.Executor(a.Ex).NewBatch()
	b.PutRecord(schemas.Record{IdempotencyKey: "k", Entity: "e", Status: schemas.StatusSucceeded})
	if err := b.Commit(); err == nil {
		t.Fatal("a commit on the failing disk succeeded")
	}
	onceflighttest.WaitFor(t, 20*time.Second, "idle A to leave its group", func() bool { return len(a.Ex.Owned()) == 0 && !a.Ex.Ready() })
	// The gauges are refreshed once a second: wait for the refresh that
	// follows the failure rather than read the one before it.
	onceflighttest.WaitFor(t, 10*time.Second, "onceflight_store_failed to read 1 after the failed write", func() bool {
		v, _ := kafkatest.Gauge(t, a.Reg, "onceflight_store_failed")
		return v == 1
	})
	// A stays up to say why, and so does its status record: the failure,
	// not the tombstone of a stopped executor.
	onceflighttest.WaitFor(t, 10*time.Second, "A's status to name the failed index", func() bool {
		s := latestStatus(t, h, "A")
		return s != nil && strings.Contains(s.Halted, "dedupe index failed")
	})
}

// TestCommitterGoesOnWhileWALSyncHeld: the committer does not wait for a
// transaction's Pebble fsync before the next transaction, and an attempt
// does not wait for one either: its intent needs only the committed
// transaction (the journal holds it, and the stored Progress stays before
// it until a later record of its key is written: DESIGN.md, "An intent
// stays out of Pebble until its record is replaced"). With the WAL's
// syncs held, a new key is executed once and a repeat is answered.
func TestCommitterGoesOnWhileWALSyncHeld(t *testing.T) {
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 30s\n", h.Effects))
	gate := diskfault.NewSyncGate(".log")
	a := h.StartNode("A", t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: []consumer.Option{
		consumer.WithStoreOptions(func(s *dedupe.Settings) { s.FS = gate.FS })}})
	defer func() {
		gate.Open()
		if err := a.Stop(); err != nil {
			t.Errorf("A: %v", err)
		}
	}()
	onceflighttest.WaitFor(t, 20*time.Second, "A owns every partition", func() bool { return a.Owns(3) })
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Outcomes(1, seen, nil)

	gate.Close()
	h.Submit("c2", "order-2", "k2", `{}`)
	h.Submit("c1-again", "order-1", "k1", `{}`)
	h.Outcomes(3, seen, nil)
	if o := seen["c1-again"]; len(o) != 1 || !o[0].Replayed {
		t.Fatalf("c1-again: %+v, want one replayed outcome while the syncs are held", o)
	}
	if o := seen["c2"]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("c2: %+v, want one success while the syncs are held", o)
	}
	// k2's final record went to Pebble in a batch whose sync is held:
	// nothing above waited for it.
	onceflighttest.WaitFor(t, 20*time.Second, "k2's record to reach the WAL's sync", func() bool { return gate.Held() > 0 })
	if n := h.EffectsOf("order-2", "k2"); n != 1 {
		t.Errorf("k2 took effect %d times, want 1", n)
	}
	gate.Open()
	h.Audit()
}
