package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli/internal/ingress"
)

// TestReadmeIngressCurls sends each `curl … /v1/commands/…` of README.md
// through the ingress's request parser as curl would send it (-d
// without a Content-Type header sends application/x-www-form-urlencoded),
// so that a reader who pastes one gets the answer the README shows, not
// a 415.
func TestReadmeIngressCurls(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "curl ") || !strings.Contains(line, "/v1/commands/") {
			continue
		}
		n++
		words := shellWords(strings.ReplaceAll(line, `'"$(cat token)"`, `t0ken'`))
		var target, body string
		header := http.Header{}
		for i := 1; i < len(words); i++ {
			switch w := words[i]; {
			case w == "-H" && i+1 < len(words):
				i++
				k, v, _ := strings.Cut(words[i], ":")
				header.Add(k, strings.TrimSpace(v))
			case w == "-d" && i+1 < len(words):
				i++
				body = words[i]
			case strings.HasPrefix(w, "http"):
				target = w
			}
		}
		if body != "" && header.Get("Content-Type") == "" {
			header.Set("Content-Type", "application/x-www-form-urlencoded") // what curl -d sends
		}
		r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
		r.Header = header
		m := regexp.MustCompile(`/v1/commands/([^/?]+)`).FindStringSubmatch(target)
		if m == nil {
			t.Errorf("README: %s: no action in the URL", line)
			continue
		}
		r.SetPathValue("action", m[1])
		if _, p := ingress.ParseRequest(r, 1<<20, time.Minute, func(string) bool { return true }); p != nil {
			t.Errorf("README: %s\nis refused %d: %s", line, p.Status, p.Detail)
		}
	}
	if n < 2 {
		t.Fatalf("found %d ingress curls in README.md", n)
	}
}

// shellWords splits a command line as sh would for the quoting the README
// uses: single and double quotes, no escapes or expansions.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, c := range s {
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
