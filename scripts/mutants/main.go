// Command mutants removes each guarantee of Onceflight on purpose, one at
// a time, and reports which tests catch the removal (issue 19: every
// guarantee is caught by at least two independent tests, deterministically;
// every row of the decision table, removed, fails a table test and the
// simulation).
//
// It never touches the tree it is run from: it copies the module's files
// (tracked and untracked, not ignored) to a temporary directory once,
// applies one mutant's edits there, runs the mutant's packages' tests with
// a timeout, and puts the files back before the next mutant.
//
//	go run ./scripts/mutants                 # every mutant, its -run filter
//	go run ./scripts/mutants -only 'row-'    # the decision-table rows
//	go run ./scripts/mutants -full           # every test of the packages (slow)
//
// It exits 1 when a mutant is caught by fewer than -min tests (a row
// mutant: when no table test or no simulation fails), 2 on a stale mutant
// (its edit no longer matches the code) or a mutant that does not build.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	only := flag.String("only", "", "run only the mutants whose name matches this regexp")
	full := flag.Bool("full", false, "run every test of each mutant's packages, not only its -run filter")
	timeout := flag.Duration("timeout", 8*time.Minute, "go test -timeout for each mutant")
	minTests := flag.Int("min", 2, "independent tests each guarantee mutant must fail")
	list := flag.Bool("list", false, "list the mutants and exit")
	keep := flag.Bool("keep", false, "keep the temporary copy of the tree (its path is printed)")
	flag.Parse()
	ms := all()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fatal(2, "-only %q: %v", *only, err)
		}
		ms = slices.DeleteFunc(ms, func(m mutant) bool { return !re.MatchString(m.Name) })
	}
	if *list {
		for _, m := range ms {
			fmt.Printf("%-28s %s\n", m.Name, m.Guarantee)
		}
		return
	}
	root, err := moduleRoot()
	if err != nil {
		fatal(2, "%v", err)
	}
	for _, m := range ms {
		if err := check(root, m); err != nil {
			fatal(2, "%v", err)
		}
	}
	tmp, err := os.MkdirTemp("", "onceflight-mutants-")
	if err != nil {
		fatal(2, "%v", err)
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "copy of the tree:", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if err := copyTree(root, tmp); err != nil {
		fatal(2, "copying the tree: %v", err)
	}
	fmt.Printf("| mutant | removes | failing tests | verdict |\n|---|---|---|---|\n")
	worst := 0
	for _, m := range ms {
		start := time.Now()
		res, err := runMutant(tmp, m, *full, *timeout)
		verdict, code := judge(m, res, err, *minTests)
		worst = max(worst, code)
		fmt.Printf("| `%s` | %s | %s | %s (%s) |\n", m.Name, m.Guarantee, res.String(), verdict, time.Since(start).Round(time.Second))
	}
	os.Exit(worst)
}

func fatal(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mutants: "+format+"\n", args...)
	os.Exit(code)
}

// result is what one mutant's test run said.
type result struct {
	failed  []string // top-level tests that failed, in order of failure
	timeout string   // the test running when go test's -timeout fired
	build   string   // the build failure, if the mutant does not build
}

func (r result) String() string {
	s := strings.Join(r.failed, ", ")
	if r.timeout != "" {
		s += " (hung: " + r.timeout + ", killed by -timeout)"
	}
	if s == "" {
		return "none"
	}
	return s
}

// judge says whether m was caught well enough: two independent tests (a
// test that only hangs until -timeout does not count), or for a row of the
// decision table a table test and the simulation.
func judge(m mutant, r result, err error, minTests int) (string, int) {
	switch {
	case err != nil:
		return "ERROR: " + err.Error(), 2
	case r.build != "":
		return "does not build: " + r.build, 2
	case m.Row:
		table := slices.ContainsFunc(r.failed, func(t string) bool { return strings.HasSuffix(t, "Rows") || t == "TestSeen" })
		simulated := slices.Contains(r.failed, sim)
		switch {
		case table && simulated:
			return "caught (table and simulation)", 0
		case table:
			return "caught by the table only", 1
		case simulated:
			return "caught by the simulation only", 1
		}
		return "NOT CAUGHT", 1
	case len(r.failed) >= minTests:
		return "caught", 0
	case len(r.failed) > 0:
		return fmt.Sprintf("caught by %d test(s), want %d", len(r.failed), minTests), 1
	}
	return "NOT CAUGHT", 1
}

// check verifies that each of m's edits applies: its Old occurs exactly
// once in its file.
func check(root string, m mutant) error {
	for _, e := range m.Edits {
		b, err := os.ReadFile(filepath.Join(root, e.File))
		if err != nil {
			return fmt.Errorf("mutant %s: %w", m.Name, err)
		}
		if n := strings.Count(string(b), e.Old); n != 1 {
			return fmt.Errorf("mutant %s is stale: %s has %d copies of %q, want exactly 1 (update scripts/mutants/mutants.go with the code)", m.Name, e.File, n, e.Old)
		}
	}
	return nil
}

// runMutant applies m in the copy at dir, runs its tests and restores the
// files.
func runMutant(dir string, m mutant, full bool, timeout time.Duration) (result, error) {
	orig := map[string][]byte{}
	defer func() {
		for f, b := range orig {
			_ = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
	}()
	for _, e := range m.Edits {
		path := filepath.Join(dir, e.File)
		b, err := os.ReadFile(path)
		if err != nil {
			return result{}, err
		}
		if _, ok := orig[e.File]; !ok {
			orig[e.File] = b
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), e.Old, e.New, 1)), 0o644); err != nil {
			return result{}, err
		}
	}
	args := []string{"test", "-count=1", "-json", "-timeout", timeout.String()}
	if !full && m.Run != "" {
		args = append(args, "-run", "^("+m.Run+")")
	}
	args = append(args, m.Pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return result{}, err
	}
	return parse(&out), nil
}

// event is one line of go test -json.
type event struct {
	Action, Package, Test, Output string
}

// parse reads go test -json output: the top-level tests that failed, the
// test a -timeout panic named, and a build failure.
func parse(r io.Reader) result {
	var res result
	running := map[string]bool{}
	var build strings.Builder
	for _, line := range strings.Split(readAll(r), "\n") {
		var ev event
		if json.Unmarshal([]byte(line), &ev) != nil {
			// go test prints build errors outside the JSON stream.
			if strings.Contains(line, ".go:") || strings.HasPrefix(line, "FAIL") && strings.Contains(line, "[build failed]") {
				build.WriteString(strings.TrimSpace(line) + "; ")
			}
			continue
		}
		top, _, _ := strings.Cut(ev.Test, "/")
		switch ev.Action {
		case "build-output":
			build.WriteString(strings.TrimSpace(ev.Output) + "; ")
		case "run":
			if ev.Test != "" {
				running[ev.Test] = true
			}
		case "pass", "skip":
			delete(running, ev.Test)
		case "fail":
			delete(running, ev.Test)
			if ev.Test != "" && !slices.Contains(res.failed, top) {
				res.failed = append(res.failed, top)
			}
		case "output":
			if strings.HasPrefix(ev.Output, "panic: test timed out") {
				for t := range running {
					if !strings.Contains(t, "/") {
						res.timeout = t
					}
				}
			}
			if strings.Contains(ev.Output, "[build failed]") || strings.Contains(ev.Output, "[setup failed]") {
				build.WriteString(strings.TrimSpace(ev.Output) + "; ")
			}
		}
	}
	if res.timeout != "" {
		res.failed = slices.DeleteFunc(res.failed, func(t string) bool { return t == res.timeout })
	}
	if len(res.failed) == 0 && res.timeout == "" {
		res.build = strings.TrimSuffix(build.String(), "; ")
	}
	return res
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}

// moduleRoot is the directory of the go.mod of the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the onceflight module: run from its tree")
	}
	return filepath.Dir(mod), nil
}

// copyTree copies the module's files — tracked and untracked, not ignored
// (git ls-files), so build output and data stay behind — from root to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
