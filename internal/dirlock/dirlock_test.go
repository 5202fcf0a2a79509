package dirlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A lock held in this process is refused to a second Acquire: flock locks
// belong to open file descriptions, so this is what another process sees.
func TestSecondAcquireRefusedNamingDirAndPID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire: %v, want a HeldError", err)
	}
	if he.PID != os.Getpid() {
		t.Errorf("holder PID %d, want %d", he.PID, os.Getpid())
	}
	for _, want := range []string{dir, strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not name %q", err, want)
		}
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	if err := l2.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestHeldAcrossProcesses runs the test binary as the second process.
func TestHeldAcrossProcesses(t *testing.T) {
	if dir := os.Getenv("DIRLOCK_CHILD_DIR"); dir != "" {
		_, err := Acquire(dir)
		if err == nil {
			os.Exit(0)
		}
		os.Stderr.WriteString(err.Error())
		os.Exit(3)
	}
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHeldAcrossProcesses$")
	cmd.Env = append(os.Environ(), "DIRLOCK_CHILD_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("child: %v, want exit 3 (refused); output %q", err, out)
	}
	if !strings.Contains(string(out), "process "+strconv.Itoa(os.Getpid())) {
		t.Errorf("child's message %q does not name the holder PID %d", out, os.Getpid())
	}
}

func TestStaleFileWithoutLockIsTaken(t *testing.T) {
	dir := t.TempDir()
	// A crashed holder leaves its PID; the kernel dropped its lock.
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("stale lock file refused: %v", err)
	}
	defer l.Release()
	if pid := readPID(filepath.Join(dir, FileName)); pid != os.Getpid() {
		t.Errorf("lock file says %d, want our PID %d", pid, os.Getpid())
	}
}
