package decide

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDocsTable: the decision tables in docs/guarantees.md are Rows and
// DecisionRows, row for row, in order. On a mismatch it prints the table
// to paste.
func TestDocsTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/guarantees.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for name, rows := range map[string][]Row{"Rows": Rows, "DecisionRows": DecisionRows} {
		begin, end := "<!-- table "+name+": begin (internal/decide."+name+", checked by TestDocsTable) -->", "<!-- table "+name+": end -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Errorf("docs/guarantees.md has no %q ... %q section", begin, end)
			continue
		}
		if got, want := strings.TrimSpace(doc[i+len(begin):j]), DocsTable(rows); got != want {
			t.Errorf("docs/guarantees.md's table differs from decide.%s; replace it with:\n\n%s", name, want)
		}
	}
}

// DocsTable renders rows as a Markdown table of docs/guarantees.md.
func DocsTable(rows []Row) string {
	var b strings.Builder
	b.WriteString("| # | row | when | what happens |\n|---|---|---|---|\n")
	for i, r := range rows {
		b.WriteString("| " + strconv.Itoa(i+1) + " | `" + r.Name + "` | " + r.When + " | " + r.Then + " |\n")
	}
	return strings.TrimSpace(b.String())
}
