package dedupe

import (
	"errors"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/onceflight/onceflight/internal/diskfault"
	"github.com/onceflight/onceflight/schemas"
)

// TestWriteFailureFailsTheStore: once the disk refuses a write under a
// commit, the commit returns ErrFailed (the process goes on), and every
// later call — reads included, even ones its caches could answer — is
// refused, because the journal may hold records the index lost. Reopened
// on a healthy disk, the index has what committed before the fault.
func TestWriteFailureFailsTheStore(t *testing.T) {
	for name, inject := range map[string]error{"EIO": errorfs.ErrInjected, "ENOSPC": syscall.ENOSPC} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			disk := diskfault.New(inject)
			s, err := Open(dir, onFS(disk.FS))
			if err != nil {
				t.Fatal(err)
			}
			put(t, s, rec("k1", "e1", schemas.StatusSucceeded, 0))
			if _, _, err := s.Entity("e1"); err != nil { // fills the entity cache
				t.Fatal(err)
			}
			if s.Failed() != nil {
				t.Fatalf("healthy store reports %v", s.Failed())
			}

			disk.Fail()
			b := s.NewBatch()
			b.PutRecord(rec("k2", "e1", schemas.StatusSucceeded, 0))
			err = b.Commit()
			mustHaveFailed(t, s, err)
			t.Logf("commit: %v", err)
			if _, _, err := s.Lookup("e1", "k1"); !errors.Is(err, ErrFailed) {
				t.Errorf("Lookup after the failure: %v, want ErrFailed", err)
			}
			if _, _, err := s.Entity("e1"); !errors.Is(err, ErrFailed) {
				t.Errorf("Entity (cached) after the failure: %v, want ErrFailed", err)
			}
			if _, err := s.Progress(0); !errors.Is(err, ErrFailed) {
				t.Errorf("Progress after the failure: %v, want ErrFailed", err)
			}
			b = s.NewBatch()
			b.PutRecord(rec("k3", "e1", schemas.StatusSucceeded, 0))
			if err := b.Commit(); !errors.Is(err, ErrFailed) {
				t.Errorf("a second commit: %v, want ErrFailed", err)
			}
			if err := s.Close(); err != nil {
				t.Logf("close of the failed store: %v", err)
			}

			s2 := openTest(t, dir)
			if _, ok := mustLookup(t, s2, "k1"); !ok {
				t.Error("k1, committed before the fault, is missing after reopening")
			}
			if _, ok := mustLookup(t, s2, "k2"); ok {
				t.Error("k2, whose commit failed, is in the index")
			}
		})
	}
}

// TestUnsyncedProgressLostInACrash: the executor commits transactions
// that write no record (repeats, forwards) with CommitNoSync. A crash
// (power loss: what was not synced is gone) may lose that Progress but
// nothing synced before it: the index comes back at an older journal
// offset with every record it had there, and restore replays the rest.
func TestUnsyncedProgressLostInACrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open("db", onFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.PutRecord(rec("k1", "e1", schemas.StatusSucceeded, 0))
	b.SetProgress(0, Progress{JournalOffset: 10, Epoch: 1, LastHash: "sha256:h-k1"})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b = s.NewBatch()
	b.SetProgress(0, Progress{JournalOffset: 15, Epoch: 1, LastHash: "sha256:h-k1"})
	if err := b.CommitNoSync(); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Progress(0); p.JournalOffset != 15 {
		t.Fatalf("progress before the crash: %+v", p)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()

	s2, err := Open("db", onFS(crashed))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	p, err := s2.Progress(0)
	if err != nil {
		t.Fatal(err)
	}
	if p.JournalOffset != 10 {
		t.Errorf("progress after the crash: %+v, want the synced offset 10 (restore replays from there)", p)
	}
	if _, ok := mustLookup(t, s2, "k1"); !ok {
		t.Error("k1, committed with a sync, is gone after the crash")
	}
}

// onFS opens a store on fs (a failing or crashed disk).
// mustHaveFailed checks that a commit on a failing disk returned ErrFailed
// and left the store failed, its Failure channel closed.
func mustHaveFailed(t *testing.T, s *Store, commitErr error) {
	t.Helper()
	if !errors.Is(commitErr, ErrFailed) {
		t.Fatalf("commit on a failing disk: %v, want ErrFailed", commitErr)
	}
	if !errors.Is(s.Failed(), ErrFailed) {
		t.Fatalf("Failed() = %v", s.Failed())
	}
	select {
	case <-s.Failure():
	default:
		t.Error("Failure() not closed after the failure")
	}
}

func onFS(fs vfs.FS) Option { return func(s *Settings) { s.FS = fs } }
