package dedupe

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrFailed is wrapped by every call on a Store after a write failed in a
// way Pebble cannot continue from (an I/O error or a full disk under the
// WAL or the MANIFEST). From then on the store answers nothing: records
// that committed in the journal may be missing from it, so even its caches
// cannot be trusted. The journal holds every committed record; restarting
// on a healthy disk restores the index from it.
var ErrFailed = errors.New("dedupe: store failed")

// failure is set once, by Pebble's Fatalf, and read by every call.
type failure struct {
	err  atomic.Pointer[error]
	once sync.Once
	ch   chan struct{} // closed when err is set
}

func newFailure() *failure { return &failure{ch: make(chan struct{})} }

func (f *failure) set(msg string) {
	err := fmt.Errorf("%w: %s", ErrFailed, msg)
	f.err.CompareAndSwap(nil, &err)
	f.once.Do(func() { close(f.ch) })
}

func (f *failure) get() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// fatalPanic is what Fatalf panics with, so that guard tells Pebble's
// fatal errors from other panics.
type fatalPanic struct{ msg string }

// Failed returns why the store stopped answering (wrapping ErrFailed), or
// nil while it is healthy.
func (s *Store) Failed() error { return s.fail.get() }

// Failure is closed when the store fails, so that an idle executor learns
// of a failed background write (a prune) at once, not at its next command.
func (s *Store) Failure() <-chan struct{} { return s.fail.ch }

// usable is checked at the start of every call.
func (s *Store) usable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.fail.get()
}

// guard runs a Pebble write. Pebble reports a failed WAL or MANIFEST write
// through Logger.Fatalf on the writing goroutine, and its default exits the
// process; pebbleLogger.Fatalf marks the store failed and panics instead,
// and guard turns that panic into the error, so the executor can stop
// taking work, say why in /readyz, and let other instances take over its
// partitions. A Fatalf on one of Pebble's own goroutines (a background
// flush or compaction) has no caller to return to: that panic still stops
// the process, which is what Pebble's default would do.
//
// Every write to Pebble goes through guard: once it returned, the
// iterators lookups reuse are stale (pointIters), whether it succeeded or
// not, and so is every record read ahead (recordWrites: guard does not
// know which record keys the write had).
func (s *Store) guard(write func() error) error {
	defer s.recWrites.all.Add(1)
	return s.guardKeys(write)
}

// guardKeys is guard for a write whose caller bumps recordWrites for each
// record key it wrote, once it returned (Batch.finish).
func (s *Store) guardKeys(write func() error) (err error) {
	if err := s.usable(); err != nil {
		return err
	}
	defer s.points.wrote()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if _, ok := r.(fatalPanic); !ok {
			panic(r)
		}
		err = s.fail.get()
	}()
	return write()
}
