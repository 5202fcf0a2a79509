package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// anchor is the id GitHub gives a Markdown heading: lower case, spaces as
// dashes, punctuation other than - and _ dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the heading ids of every page in this directory.
func anchors(t *testing.T) map[string]map[string]bool {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil || len(pages) < 5 {
		t.Fatalf("pages: %v %v", pages, err)
	}
	heading := regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	out := map[string]map[string]bool{}
	for _, p := range pages {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(stripCode(string(raw)), -1) {
			id := anchor(strings.ReplaceAll(m[1], "`", ""))
			if ids[id] {
				t.Errorf("%s: two headings with the id %q; links to it are ambiguous", p, id)
			}
			ids[id] = true
		}
		out[p] = ids
	}
	return out
}

// stripCode blanks fenced code blocks, whose # lines are not headings.
func stripCode(s string) string {
	return regexp.MustCompile("(?s)```.*?```").ReplaceAllString(s, "")
}

func TestHeadingAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"G1 single-flight":   "g1-single-flight",
		"The record as JSON": "the-record-as-json",
		"config validate":    "config-validate",
		"Words, used (here)": "words-used-here",
	} {
		if got := anchor(in); got != want {
			t.Errorf("anchor(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLinksResolve: every docs/FILE.md#ID in the repository (outside build
// outputs) and every relative FILE.md#ID link between the pages names an
// existing page and heading.
func TestLinksResolve(t *testing.T) {
	ids := anchors(t)
	check := func(where, page, id string) {
		t.Helper()
		got, ok := ids[page]
		if !ok {
			t.Errorf("%s: docs/%s does not exist", where, page)
			return
		}
		if id != "" && !got[id] {
			t.Errorf("%s: docs/%s has no heading #%s", where, page, id)
		}
	}
	// Not preceded by a path ("franz-go/docs/testing.md" is another
	// repository's).
	fromRepo := regexp.MustCompile(`(?:^|[^\w/.-])docs/([a-z-]+\.md)(?:#([a-z0-9_-]+))?`)
	n := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "bin" || name == "node_modules" || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".txt", ".service":
		default:
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fromRepo.FindAllStringSubmatch(string(raw), -1) {
			n++
			check(path, m[1], m[2])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Links between the pages are relative: [text](page.md#id), [text](#id).
	rel := regexp.MustCompile(`\]\(([a-z-]+\.md)?(?:#([a-z0-9_-]+))?\)`)
	for page := range ids {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rel.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if target == "" {
				target = page
			}
			n++
			check(page, target, m[2])
		}
	}
	if n < 30 {
		t.Errorf("only %d links checked; the patterns no longer match the references", n)
	}
}
