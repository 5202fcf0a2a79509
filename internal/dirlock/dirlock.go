// Package dirlock gives one process at a time a data directory.
//
// Two processes on one directory corrupt it quietly: a second embedded
// broker rewrites the first one's log, and a second executor fails deep in
// Pebble with a bare EAGAIN that names neither the directory nor who holds
// it. Taking an exclusive lock on a LOCK file first, and writing our PID
// into it, turns both into one message an operator can act on.
//
// The lock is an advisory flock(2) (LockFileEx on Windows) through
// github.com/gofrs/flock: the kernel releases it when the process dies, so
// a crash never leaves a stale lock behind; the PID in the file is only
// information for the message, never trusted as the lock itself.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gofrs/flock"
)

// FileName is the lock file's name inside the locked directory.
const FileName = "LOCK"

// Lock is a held lock on a directory. Release it when the directory's last
// writer has closed.
type Lock struct {
	fl  *flock.Flock
	dir string
}

// HeldError is returned by Acquire when another process holds the lock.
type HeldError struct {
	// Dir is the directory asked for, as given.
	Dir string
	// PID is the holder's process id as it wrote it, or 0 when the file
	// did not say (the holder may be between locking and writing it).
	PID int
}

func (e *HeldError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by %s (lock file %s); stop it or choose another directory",
		e.Dir, holder, filepath.Join(e.Dir, FileName))
}

// ErrHeld matches every HeldError with errors.Is.
var ErrHeld = errors.New("data directory in use")

// Is makes errors.Is(err, ErrHeld) true for a HeldError.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Acquire creates dir if needed and locks it without waiting: a directory
// held by another process is a *HeldError at once, because waiting would
// make a misconfigured second instance hang instead of saying why.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	fl := flock.New(path)
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	if !ok {
		return nil, &HeldError{Dir: dir, PID: readPID(path)}
	}
	// Written through a second descriptor: the lock belongs to the open
	// file description of fl, which this does not touch. A failed write
	// is ignored: the PID only makes a rival's message more precise, and
	// Windows refuses writes to a file locked through another handle.
	_ = os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	return &Lock{fl: fl, dir: dir}, nil
}

// Release gives the directory up. It is safe to call more than once. The
// file stays (removing it would race with a process locking it right
// then); its PID is stale but harmless, since only the flock counts.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	if err := l.fl.Unlock(); err != nil {
		return fmt.Errorf("unlock data directory %s: %w", l.dir, err)
	}
	return nil
}

// readPID returns the PID in a lock file, or 0 if it holds none.
func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
