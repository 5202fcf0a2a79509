package cli

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestCLIDocsMatchFlags holds docs/cli.md to the binary's flags: in each
// command's section (`## serve`, `## config validate`, …), every `--flag`
// named must be a flag of that command (or of its subcommands, for a
// section covering several), and every flag of the command must be named
// in its section or under "Common flags". A flag added without its line,
// or a line left for a flag that is gone, fails here.
func TestCLIDocsMatchFlags(t *testing.T) {
	raw, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	var order []string
	for _, part := range regexp.MustCompile(`(?m)^## `).Split(string(raw), -1)[1:] {
		title, body, _ := strings.Cut(part, "\n")
		sections[title] = body
		order = append(order, title)
	}
	root := newRootCmd()
	flagRe := regexp.MustCompile("(?:^|[\\s`(\\[|,])--([a-z][a-z0-9-]*)")
	shortRe := regexp.MustCompile("(?:^|[\\s`(\\[|,])-([A-Za-z])\\b")
	named := func(text string) map[string]bool {
		m := map[string]bool{}
		for _, f := range flagRe.FindAllStringSubmatch(text, -1) {
			m[f[1]] = true
		}
		for _, f := range shortRe.FindAllStringSubmatch(text, -1) {
			m["-"+f[1]] = true
		}
		return m
	}
	// A code span that starts with another command (`serve --console
	// ADDR`) is a cross-reference: its flags are that command's.
	spanRe := regexp.MustCompile("`(?:onceflight )?([a-z]+) [^`]*`")
	crossRefs := func(title, text string) string {
		own := strings.Fields(title)[0]
		return spanRe.ReplaceAllStringFunc(text, func(span string) string {
			word := spanRe.FindStringSubmatch(span)[1]
			if c, _, err := root.Find([]string{word}); err == nil && c != root && word != own {
				return ""
			}
			return span
		})
	}
	common := named(sections["Common flags"])
	checked := 0
	for _, title := range order {
		if title == "Common flags" || title == "Exit codes" {
			continue
		}
		cmd, rest, err := root.Find(strings.Fields(title))
		if err != nil || len(rest) > 0 || cmd == root {
			t.Errorf("docs/cli.md section %q names no command", title)
			continue
		}
		checked++
		// A section covers its command and, for a group like `topics`,
		// its subcommands.
		cmds := append([]*cobra.Command{cmd}, cmd.Commands()...)
		have := map[string]bool{}
		for _, c := range cmds {
			for _, fs := range []*pflag.FlagSet{c.Flags(), c.InheritedFlags()} {
				fs.VisitAll(func(f *pflag.Flag) {
					if !f.Hidden {
						have[f.Name] = true
					}
				})
			}
		}
		doc := named(crossRefs(title, sections[title]))
		for f := range doc {
			if !have[f] && f != "help" && f != "version" && !strings.HasPrefix(f, "-") {
				t.Errorf("docs/cli.md section %q names --%s, which `onceflight %s` does not have", title, f, title)
			}
		}
		var missing []string
		for _, c := range cmds {
			c.Flags().VisitAll(func(f *pflag.Flag) {
				short := f.Shorthand != "" && (doc["-"+f.Shorthand] || common["-"+f.Shorthand])
				if f.Hidden || f.Name == "help" || doc[f.Name] || common[f.Name] || short {
					return
				}
				missing = append(missing, c.CommandPath()+" --"+f.Name)
			})
		}
		slices.Sort(missing)
		for _, m := range slices.Compact(missing) {
			t.Errorf("docs/cli.md section %q does not name the flag %s", title, m)
		}
	}
	if checked < 15 {
		t.Fatalf("only %d command sections checked", checked)
	}
	// Every command has its section (a group may have one for itself,
	// `audit`, or for each subcommand, `config validate`).
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		covered := sections[c.Name()] != ""
		for _, sub := range c.Commands() {
			covered = covered || sections[c.Name()+" "+sub.Name()] != ""
		}
		if !covered {
			t.Errorf("docs/cli.md has no section for `onceflight %s`", c.Name())
		}
	}
}

// TestCLIDocsMatchDefaults holds the defaults docs/cli.md states to the
// binary's: a table row `| `--flag` | default | … |` and a "`--flag`
// (default X)" in prose, where the default is a literal (`1024`, `45s`,
// `onceflight.yaml`) or a size (512 KiB, 4 MiB), must be what --help
// shows. Defaults written in words (none, hostname-pid) are not checked.
func TestCLIDocsMatchDefaults(t *testing.T) {
	raw, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	sizeRe := regexp.MustCompile(`^([0-9]+) (KiB|MiB|GiB)$`)
	literal := func(cell string) (string, bool) {
		cell = strings.TrimSpace(cell)
		if m := sizeRe.FindStringSubmatch(cell); m != nil {
			n, _ := strconv.Atoi(m[1])
			return strconv.Itoa(n << map[string]int{"KiB": 10, "MiB": 20, "GiB": 30}[m[2]]), true
		}
		if v, ok := strings.CutPrefix(cell, "`"); ok {
			// Not a placeholder (`<journal topic>`) or another flag.
			if v, _, ok := strings.Cut(v, "`"); ok && !strings.ContainsAny(v, "<>") && !strings.HasPrefix(v, "-") {
				return v, true
			}
		}
		return "", false
	}
	rowRe := regexp.MustCompile("(?m)^\\| `--([a-z][a-z0-9-]*)` \\| ([^|]*) \\|")
	proseRe := regexp.MustCompile("`--([a-z][a-z0-9-]*)` \\(default ([^)]*)\\)")
	checked := 0
	for _, part := range regexp.MustCompile(`(?m)^## `).Split(string(raw), -1)[1:] {
		title, body, _ := strings.Cut(part, "\n")
		cmd, rest, err := root.Find(strings.Fields(title))
		if err != nil || len(rest) > 0 || cmd == root {
			continue // TestCLIDocsMatchFlags names these
		}
		for _, m := range append(rowRe.FindAllStringSubmatch(body, -1), proseRe.FindAllStringSubmatch(body, -1)...) {
			want, ok := literal(m[2])
			if !ok {
				continue
			}
			// A section covering subcommands (audit's) may name a
			// flag several of them have: one must default to it.
			var have []string
			for _, c := range append([]*cobra.Command{cmd}, cmd.Commands()...) {
				if f := c.Flags().Lookup(m[1]); f != nil {
					have = append(have, f.DefValue)
					// A default applied in code (nil: topic) is
					// in the usage text, which --help prints.
					if _, d, ok := strings.Cut(f.Usage, "(default "); ok {
						have = append(have, strings.TrimSuffix(d, ")"))
					}
				}
			}
			if len(have) == 0 {
				continue // TestCLIDocsMatchFlags says so
			}
			checked++
			if !slices.Contains(have, want) {
				t.Errorf("docs/cli.md section %q: --%s defaults to %s, but `onceflight %s --help` says %q", title, m[1], m[2], title, have)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d defaults checked", checked)
	}
}
