package kafkaconf

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseProperties checks that the parser never panics, that what it
// returns is well formed (a key without separators or surrounding space, a
// value without line breaks, a source naming a line of the input, lines in
// order), and that writing the properties back as key=value lines parses
// to the same properties: nothing is lost or split between lines.
func FuzzParseProperties(f *testing.F) {
	for _, s := range []string{
		"security.protocol=SASL_SSL\nsasl.mechanism: PLAIN\n",
		"# comment\n! other\n\n  a = b = c  \n",
		"\ufeffclient.id=x\r\nsasl.password=p:w=d\r\n",
		"key\n",
		"=v\n",
		"a=b\\\nc\n",
		"a:\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		props, err := parseProperties("f", strings.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("error %q does not name the file and line", err)
			}
			return
		}
		lines := strings.Count(in, "\n") + 1
		prev := 0
		var back strings.Builder
		for _, p := range props {
			if p.Key == "" || strings.ContainsAny(p.Key, "=: \t\n\r") {
				t.Fatalf("bad key %q", p.Key)
			}
			if strings.ContainsAny(p.Value, "\n\r") || p.Value != strings.TrimSpace(p.Value) {
				t.Fatalf("bad value %q", p.Value)
			}
			n, err := strconv.Atoi(strings.TrimPrefix(p.Source, "f:"))
			if err != nil || n <= prev || n > lines {
				t.Fatalf("source %q after line %d of %d", p.Source, prev, lines)
			}
			prev = n
			back.WriteString(p.Key + "=" + p.Value + "\n")
		}
		again, err := parseProperties("f", strings.NewReader(back.String()))
		if err != nil || len(again) != len(props) {
			t.Fatalf("written back as %q: %v, %d properties, want %d", back.String(), err, len(again), len(props))
		}
		for i := range props {
			if again[i].Key != props[i].Key || again[i].Value != props[i].Value {
				t.Fatalf("property %d: %+v became %+v", i, props[i], again[i])
			}
		}
	})
}
