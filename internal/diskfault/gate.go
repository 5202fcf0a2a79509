package diskfault

import (
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// SyncGate is the operating system's file system with a gate that, while
// closed, holds every sync of the files whose names end in a suffix (a
// slow disk under Pebble's WAL: ".log"). Nothing fails: a held sync goes
// on once the gate opens. Pass FS to dedupe.Settings.FS.
type SyncGate struct {
	FS vfs.FS

	mu     sync.Mutex
	opened *sync.Cond
	closed bool
	held   int // syncs that reached the gate while it was closed
}

// NewSyncGate returns an open gate on the syncs of files named *suffix.
func NewSyncGate(suffix string) *SyncGate {
	g := &SyncGate{}
	g.opened = sync.NewCond(&g.mu)
	g.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, suffix) {
				g.pass()
			}
		}
		return nil
	}))
	return g
}

func (g *SyncGate) pass() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.held++
	}
	for g.closed {
		g.opened.Wait()
	}
}

// Close makes later syncs wait until Open.
func (g *SyncGate) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// Open lets every held sync and every later one through.
func (g *SyncGate) Open() {
	g.mu.Lock()
	g.closed = false
	g.mu.Unlock()
	g.opened.Broadcast()
}

// Held is how many syncs reached the gate while it was closed.
func (g *SyncGate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}
