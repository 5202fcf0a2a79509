package e2e

import (
	"os"
	"strings"
	"testing"
	"time"
)

// EnvOldBin names an earlier release's onceflight binary for
// TestUpgradeInPlace; `make upgrade-test` builds one from the git history.
const envOldBin = "ONCEFLIGHT_E2E_OLD_BIN"

// TestUpgradeInPlace: two executors of an earlier release run a stream of
// effects against the test service (each call takes 20–40 ms, so some are
// always in flight). This build's `topics apply` raises what the new build
// needs on the live cluster (a second run changes nothing); then one old
// executor is stopped with SIGTERM and the other killed (-9), each with
// calls in flight, and each is replaced by this build on the same data
// dir. Every command must be answered once, each key take effect once, the
// inherited in-flight executions be confirmed rather than repeated, and
// the audit (this build's) pass over the journal both releases wrote.
func TestUpgradeInPlace(t *testing.T) {
	old := os.Getenv(envOldBin)
	if old == "" {
		t.Skipf("set %s to an earlier release's binary (make upgrade-test builds one from the git history)", envOldBin)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("%s: %v", envOldBin, err)
	}
	// The executors started below inherit the environment, and serve
	// warns about ONCEFLIGHT_ variables it does not read.
	os.Unsetenv(envOldBin)
	t.Cleanup(func() { os.Setenv(envOldBin, old) })
	// Releases before the version command (round 1) answer it with a
	// usage error; the binary is still the one under test.
	if out, _, code := runCmd(t, old, "", "version"); code == 0 {
		t.Logf("upgrading from %s", strings.TrimSpace(out))
	} else {
		t.Logf("upgrading from %s (a release without `onceflight version`)", old)
	}
	c := newChaosClusterOf(t, 2, 6*time.Second, old)
	prod := c.startProducer("up", 24, 11)
	time.Sleep(3 * time.Second)

	out, errOut, code := runCLI(t, "topics", "apply", "--brokers", c.brokers, "--config", c.execs[0].config)
	t.Logf("topics apply (exit %d):\n%s%s", code, out, errOut)
	if code != 0 {
		t.Fatalf("topics apply on the old release's topics: exit %d", code)
	}
	if out, errOut, code := runCLI(t, "topics", "apply", "--brokers", c.brokers, "--config", c.execs[0].config); code != 0 || !strings.Contains(out, "nothing to change") {
		t.Fatalf("a second topics apply: exit %d, want 0 and nothing to change:\n%s%s", code, out, errOut)
	}

	graceful, killed := c.execs[0], c.execs[1]
	n := c.waitInFlight(graceful)
	graceful.p.term(30 * time.Second)
	t.Logf("SIGTERM %s (old release) with %d calls in flight", graceful.id, n)
	graceful.binary = ""
	c.start(graceful)
	time.Sleep(2 * time.Second)

	c.killInFlight(killed)
	killed.binary = ""
	c.start(killed)
	time.Sleep(5 * time.Second)
	rep := c.finish(prod, false)
	t.Logf("upgrade: %d commands, %d outcomes, %d confirmations", rep.commands, rep.outcomes, rep.confirms)
}
