package decide

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDocsTable: the decision table in docs/guarantees.md is Rows, row for
// row, in order. On a mismatch it prints the table to paste.
func TestDocsTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/guarantees.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	const begin, end = "<!-- decision table: begin (generated from consumer/decide.Rows) -->", "<!-- decision table: end -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/guarantees.md has no %q ... %q section", begin, end)
	}
	if got, want := strings.TrimSpace(doc[i+len(begin):j]), DocsTable(); got != want {
		t.Fatalf("docs/guarantees.md's decision table differs from decide.Rows; replace it with:\n\n%s", want)
	}
}

// DocsTable renders Rows as the Markdown table of docs/guarantees.md.
func DocsTable() string {
	var b strings.Builder
	b.WriteString("| # | row | when | what happens |\n|---|---|---|---|\n")
	for i, r := range Rows {
		b.WriteString("| " + strconv.Itoa(i+1) + " | `" + r.Name + "` | " + r.When + " | " + r.Then + " |\n")
	}
	return strings.TrimSpace(b.String())
}
