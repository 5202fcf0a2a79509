package cmalloc

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// childEnv marks the re-executed test binary: a thread keeps its arena, so
// the load makes arenas only in a process that has not run it before.
const childEnv = "CMALLOC_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		before := Arenas()
		AllocateOnThreads(8)
		fmt.Printf("%d %d\n", before, Arenas())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestThreadsMakeArenas: without a bound, eight threads allocating at once
// add arenas, and leave more than package bound allows (2). It shows that
// bound's test, which runs the same load, can tell a bound from none.
func TestThreadsMakeArenas(t *testing.T) {
	if os.Getenv("MALLOC_ARENA_MAX") != "" || os.Getenv("GLIBC_TUNABLES") != "" {
		t.Skip("the environment sets glibc's malloc bounds")
	}
	if Arenas() < 0 {
		t.Skip("not glibc with cgo: no arenas to count")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var before, after int
	if _, err := fmt.Sscanf(string(out), "%d %d", &before, &after); err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	if after <= before || after <= 2 {
		t.Errorf("%d arenas after 8 threads allocated (%d before): the load does not make arenas", after, before)
	}
}
