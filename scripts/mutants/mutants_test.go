package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMutantsApply keeps the mutants in step with the code, in make test
// (running them is make mutants): each edit matches exactly once, the
// mutated file still parses, and every test a mutant's filter names exists
// in its packages — a renamed test or a moved line fails here instead of
// leaving a mutant that tests nothing.
func TestMutantsApply(t *testing.T) {
	root := filepath.Join("..", "..")
	names := map[string]bool{}
	for _, m := range all() {
		if names[m.Name] {
			t.Errorf("two mutants named %s", m.Name)
		}
		names[m.Name] = true
		if err := check(root, m); err != nil {
			t.Error(err)
			continue
		}
		files := map[string]string{}
		for _, e := range m.Edits {
			src, ok := files[e.File]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, e.File))
				if err != nil {
					t.Fatal(err)
				}
				src = string(b)
			}
			files[e.File] = strings.Replace(src, e.Old, e.New, 1)
		}
		for f, src := range files {
			if _, err := parser.ParseFile(token.NewFileSet(), f, src, 0); err != nil {
				t.Errorf("mutant %s: %s does not parse once mutated: %v", m.Name, f, err)
			}
		}
		tests := testsOf(t, root, m.Pkgs)
		for _, name := range strings.Split(m.Run, "|") {
			name = strings.Trim(name, "^$")
			if name != "" && !tests[name] {
				t.Errorf("mutant %s: its filter names %s, which is no test of %v", m.Name, name, m.Pkgs)
			}
		}
	}
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w+)\(`)

// testsOf is the set of test function names of pkgs.
func testsOf(t *testing.T, root string, pkgs []string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, p := range pkgs {
		files, err := filepath.Glob(filepath.Join(root, p, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
		}
	}
	return out
}

// TestParse reads go test -json output as a timed-out and a failed run
// print it.
func TestParse(t *testing.T) {
	out := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"run","Package":"p","Test":"TestA/sub"}
{"Action":"fail","Package":"p","Test":"TestA/sub"}
{"Action":"fail","Package":"p","Test":"TestA"}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Output":"panic: test timed out after 1m0s\n"}
{"Action":"fail","Package":"p"}
`
	r := parse(strings.NewReader(out))
	if strings.Join(r.failed, ",") != "TestA" || r.timeout != "TestB" || r.build != "" {
		t.Fatalf("parsed %+v, want TestA failed and TestB hung", r)
	}
	r = parse(strings.NewReader(`{"ImportPath":"p","Action":"build-output","Output":"x.go:1:1: undefined: y\n"}
{"ImportPath":"p","Action":"build-fail"}
`))
	if r.build == "" || len(r.failed) != 0 {
		t.Fatalf("parsed %+v, want a build failure", r)
	}
}
