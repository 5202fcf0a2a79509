package diskfault

import (
	"errors"
	"io"
	"path/filepath"
	"syscall"
	"testing"
)

// TestFailRefusesWritesKeepsReads: a healthy disk writes; once failing,
// every write and sync returns the injected error while reads still work;
// healed, it writes again.
func TestFailRefusesWritesKeepsReads(t *testing.T) {
	d := New(syscall.ENOSPC)
	path := filepath.Join(t.TempDir(), "f")
	f, err := d.FS.Create(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("before")); err != nil {
		t.Fatalf("healthy write: %v", err)
	}
	d.Fail()
	if _, err := f.Write([]byte("during")); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write on a failing disk: %v, want ENOSPC", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("sync on a failing disk: %v, want ENOSPC", err)
	}
	r, err := d.FS.Open(path)
	if err != nil {
		t.Fatalf("open for reading on a failing disk: %v", err)
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(b) != "before" {
		t.Errorf("read on a failing disk: %q, %v", b, err)
	}
	d.Heal()
	if _, err := f.Write([]byte("after")); err != nil {
		t.Errorf("write on a healed disk: %v", err)
	}
}
