package dedupe

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/diskfault"
	"github.com/onceflight/onceflight/schemas"
)

// TestCommitSyncLaterVisibleBeforeSync: CommitSyncLater returns while the
// WAL's fsync is held, the batch readable already, and its syncWait
// returns only once the fsync went through.
func TestCommitSyncLaterVisibleBeforeSync(t *testing.T) {
	g := diskfault.NewSyncGate(".log")
	s, err := Open(t.TempDir(), onFS(g.FS))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put(t, s, rec("k1", "e1", schemas.StatusSucceeded, 0))

	g.Close()
	b := s.NewBatch()
	b.PutRecord(rec("k2", "e1", schemas.StatusSucceeded, 0))
	type committed struct {
		wait func() error
		err  error
	}
	ch := make(chan committed, 1)
	go func() {
		w, err := b.CommitSyncLater()
		ch <- committed{w, err}
	}()
	var c committed
	select {
	case c = <-ch:
	case <-time.After(20 * time.Second):
		g.Open()
		t.Fatal("CommitSyncLater waited for the WAL sync")
	}
	if c.err != nil {
		t.Fatal(c.err)
	}
	if _, ok := mustLookup(t, s, "k2"); !ok {
		t.Error("k2 is not readable once CommitSyncLater returned")
	}
	var released atomic.Bool
	synced := make(chan error, 1)
	go func() {
		err := c.wait()
		if !released.Load() {
			err = errors.New("syncWait returned while the WAL sync was held")
		}
		synced <- err
	}()
	for g.Held() == 0 {
		time.Sleep(time.Millisecond) // the WAL's sync reaches the gate
	}
	released.Store(true)
	g.Open()
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
}

// TestCommitSyncLaterFailedSyncFailsTheStore: a WAL write or sync that
// fails under CommitSyncLater fails the store as under Commit, reported
// by CommitSyncLater or by its syncWait.
func TestCommitSyncLaterFailedSyncFailsTheStore(t *testing.T) {
	disk := diskfault.New(nil)
	s, err := Open(t.TempDir(), onFS(disk.FS))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put(t, s, rec("k1", "e1", schemas.StatusSucceeded, 0))
	disk.Fail()
	b := s.NewBatch()
	b.PutRecord(rec("k2", "e1", schemas.StatusSucceeded, 0))
	wait, err := b.CommitSyncLater()
	if err == nil {
		err = wait()
	}
	mustHaveFailed(t, s, err)
}
