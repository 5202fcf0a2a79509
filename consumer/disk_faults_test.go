package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/schemas"
)

// Environment of the disk-fault child process (TestFaultDiskChild).
const (
	envDiskChild   = "ONCEFLIGHT_DISK_CHILD"    // the error to inject: EIO or ENOSPC
	envDiskBrokers = "ONCEFLIGHT_DISK_BROKERS"  // kfake's address
	envDiskConfig  = "ONCEFLIGHT_DISK_CONFIG"   // the actions file
	envDiskDir     = "ONCEFLIGHT_DISK_DATA_DIR" // Pebble's directory
	envDiskTrigger = "ONCEFLIGHT_DISK_TRIGGER"  // writes fail once this file exists
)

// TestFaultDiskChild is not a test on its own: TestFaultDisk runs it in a
// child process (a Pebble write error is fatal to the process, so it needs
// one of its own). It runs an executor whose Pebble writes and syncs fail
// once the trigger file exists.
func TestFaultDiskChild(t *testing.T) {
	kind := os.Getenv(envDiskChild)
	if kind == "" {
		t.Skip("run by TestFaultDisk")
	}
	inject := error(errorfs.ErrInjected)
	if kind == "ENOSPC" {
		inject = syscall.ENOSPC
	}
	trigger := os.Getenv(envDiskTrigger)
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		if _, err := os.Stat(trigger); err == nil {
			return inject
		}
		return nil
	}))
	store, err := dedupe.Open(os.Getenv(envDiskDir), dedupe.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	acts, err := config.Load(os.Getenv(envDiskConfig))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := consumer.New(consumer.Config{
		Brokers: strings.Split(os.Getenv(envDiskBrokers), ","), Partitions: 3, SessionTimeout: 2 * time.Second,
		ClockDrift: 100 * time.Millisecond, ExecutorID: "test",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, acts, store, append([]consumer.Option{consumer.WithRegisterer(prometheus.NewRegistry())}, shortHeartbeats...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = ex.Run(ctx)
	t.Fatalf("Run returned %v without the disk fault stopping the process", err)
}

// TestFaultDisk: Pebble's disk starts failing every write and sync (an I/O
// error; out of space) under a running executor. The executor must fail
// loudly — the process stops with the error, instead of answering from an
// index it could not update — and never publish an outcome whose record is
// not in the journal; a restart on a healthy disk rebuilds from the
// journal and answers every command once, with no effect done twice.
func TestFaultDisk(t *testing.T) {
	if os.Getenv(envDiskChild) != "" {
		t.Skip("in the child")
	}
	for _, kind := range []string{"EIO", "ENOSPC"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t)
			dir := t.TempDir()
			cfgPath := filepath.Join(dir, "actions.yaml")
			yaml := fmt.Sprintf("actions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n    timeout: 500ms\n", h.effects)
			if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			trigger := filepath.Join(dir, "fail-now")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFaultDiskChild$", "-test.count=1", "-test.v")
			child.Env = append(os.Environ(), envDiskChild+"="+kind, envDiskBrokers+"="+strings.Join(h.brokers, ","),
				envDiskConfig+"="+cfgPath, envDiskDir+"="+filepath.Join(dir, "pebble"), envDiskTrigger+"="+trigger)
			var out bytes.Buffer
			child.Stdout, child.Stderr = &out, &out
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- child.Wait() }()

			var ids []string
			submit := func(tag string, k int) {
				for i := range k {
					id := fmt.Sprintf("%s%d", tag, i)
					ids = append(ids, id)
					h.submit(id, fmt.Sprintf("order-%d", i%3), "k-"+id, `{}`)
				}
			}
			submit("ok", 3)
			seen := map[string][]schemas.Outcome{}
			h.outcomes(len(ids), seen, nil)
			if err := os.WriteFile(trigger, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			submit("bad", 3)
			var err error
			select {
			case err = <-exited:
			case <-ctx.Done():
				t.Fatalf("the executor kept running on a failing disk:\n%s", out.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(out.String(), "pebble") {
				t.Fatalf("child ended with %v, want a failure naming pebble:\n%s", err, out.String())
			}
			t.Logf("the executor stopped on the disk fault: %s", firstLine(out.String(), "panic:"))
			// Whatever was published before it died has its record in the
			// journal (the audit below checks every outcome against it).
			before := h.allOutcomes()

			m := h.startNode("test", t.TempDir(), nodeOpts{})
			h.outcomes(len(ids), seen, nil)
			if err := m.stop(); err != nil {
				t.Errorf("restart: %v", err)
			}
			all := h.allOutcomes()
			oneOutcomeEach(t, all, ids)
			effects := h.effectCount()
			for _, id := range ids {
				if s := all[id][0].Record.Status; s != schemas.StatusSucceeded {
					t.Errorf("%s: %s", id, s)
				}
				if effects["k-"+id] != 1 {
					t.Errorf("k-%s took effect %d times, want 1", id, effects["k-"+id])
				}
			}
			t.Logf("answered before the fault stopped it: %d of %d", len(before), len(ids))
			h.audit()
		})
	}
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
