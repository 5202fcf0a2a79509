// Package layers holds the test that keeps the folders honest: every package
// stands on a floor, and imports only packages on its floor or below.
package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/onceflight/onceflight"

// floors lists the module's packages from the bottom up. A pattern ending
// in "/..." is the folder and everything under it; the longest pattern that
// matches a package places it. A package may import one on its own floor
// (internal/connectors/http imports connectors) or below, never above: the executor
// never reaches the command line, a connector never reaches the executor,
// and internal/ holds only pieces below the executor.
var floors = []struct {
	name     string
	patterns []string
}{
	{"wire: what goes over Kafka, and how to reach it", []string{"internal/jcs", "schemas", "internal/wire", "partitioner", "kafkaconf", "trust", "internal/trustlog"}},
	{"low internal pieces", []string{"internal/topics", "internal/brokerfeatures", "internal/dirlock", "internal/faultnet", "internal/kafkatest",
		"internal/brokertest", "internal/client", "internal/httpauth", "internal/broker", "internal/proctest", "internal/testlog", "internal/diskfault",
		"internal/rangeread", "internal/checkpointcheck", "internal/cmalloc", "internal/cmalloc/bound"}},
	{"connectors", []string{"connectors", "connectors/...", "internal/connectors/...", "internal/apifake"}},
	{"the actions file", []string{"internal/config"}},
	{"the executor's state and staging", []string{"internal/dedupe", "internal/outbox", "internal/storeof"}},
	{"the executor's decisions", []string{"internal/decide"}},
	{"the executor", []string{"consumer"}},
	{"the public client", []string{"client"}},
	{"the audit", []string{"audit"}},
	{"test support above the executor", []string{"onceflighttest"}},
	{"the command line's pieces", []string{"cli/internal/..."}},
	{"the command line", []string{"cli"}},
	{"binaries, examples and tests of the whole", []string{"cmd/...", "examples/...", "internal/e2e", "internal/layers", "docs", "deploy", "scripts/..."}},
}

// floorOf returns the floor index of the module-relative path rel, or -1.
func floorOf(rel string) int {
	best, bestLen := -1, -1
	for i, f := range floors {
		for _, p := range f.patterns {
			n := -1
			if base, ok := strings.CutSuffix(p, "/..."); ok {
				if rel == base || strings.HasPrefix(rel, base+"/") {
					n = len(base)
				}
			} else if rel == p {
				n = len(p) + 1 // an exact name wins over a folder of the same length
			}
			if n > bestLen {
				best, bestLen = i, n
			}
		}
	}
	return best
}

// TestNoUpwardImports: `go list` of the module shows no package importing
// one above it (non-test imports; a test may drive its package from above,
// as the executor's tests do through the harness).
func TestNoUpwardImports(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var problems []string
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg := rel(fields[0])
		pf := floorOf(pkg)
		if pf < 0 {
			problems = append(problems, pkg+": on no floor; add it to floors in internal/layers")
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			r := rel(imp)
			if f := floorOf(r); f > pf {
				problems = append(problems, pkg+" ("+floors[pf].name+") imports "+r+" ("+floors[f].name+"), which stands above it")
			}
		}
	}
	if seen < 30 {
		t.Fatalf("go list named %d packages; the module has more:\n%s", seen, out)
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// TestFloorOf pins the placing rules the check depends on.
func TestFloorOf(t *testing.T) {
	for rel, want := range map[string]string{
		"consumer":                  "the executor",
		"internal/decide":           "the executor's decisions",
		"internal/apifake":          "connectors",
		"cli/internal/api":          "the command line's pieces",
		"cli":                       "the command line",
		"internal/config":           "the actions file",
		"cmd/onceflight":            "binaries, examples and tests of the whole",
		"examples/connector/ledger": "binaries, examples and tests of the whole",
	} {
		if f := floorOf(rel); f < 0 || floors[f].name != want {
			t.Errorf("%s: floor %d, want %q", rel, f, want)
		}
	}
	if f := floorOf("internal/newthing"); f != -1 {
		t.Errorf("an unlisted internal package is placed on floor %d; it must be listed", f)
	}
}

func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}
