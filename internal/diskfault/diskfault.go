// Package diskfault is the disk faults the tests inject under Pebble: a
// file system that works until switched to failing, then refuses every
// write and sync with an error of the test's choice (an I/O error, a full
// disk), while reads still work — how a dying or full disk looks to a
// running store. It wraps pebble's vfs/errorfs; pass FS to
// dedupe.Settings.FS. SyncGate (gate.go) is a slow disk instead: syncs held,
// nothing failing.
package diskfault

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Disk is the operating system's file system with a fault switch.
type Disk struct {
	// FS is what the store opens on.
	FS      vfs.FS
	inject  error
	failing atomic.Bool
}

// New returns a healthy disk that, once Fail is called, answers every
// write and sync with inject (nil: errorfs.ErrInjected, an EIO-like error;
// syscall.ENOSPC for a full disk).
func New(inject error) *Disk {
	if inject == nil {
		inject = errorfs.ErrInjected
	}
	d := &Disk{inject: inject}
	d.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if d.failing.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return d.inject
		}
		return nil
	}))
	return d
}

// Fail makes every later write and sync fail.
func (d *Disk) Fail() { d.failing.Store(true) }

// Heal makes the disk work again (a store that failed stays failed: it
// must be reopened).
func (d *Disk) Heal() { d.failing.Store(false) }
