package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadData(t *testing.T) {
	file := filepath.Join(t.TempDir(), "d.json")
	if err := os.WriteFile(file, []byte("{\n  \"amount\": 100\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := map[string]string{
		`{"a": 1}`: `{"a":1}`,
		" {} ":     `{}`,
		"@" + file: `{"amount":100}`,
		"@-":       `{"from":"stdin"}`,
		"":         "",
	}
	for in, want := range ok {
		got, err := readData(in, strings.NewReader(`{"from": "stdin"}`))
		if err != nil || string(got) != want {
			t.Errorf("readData(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		`[1,2]`:            "an array",
		`"refund"`:         "a string",
		`42`:               "a number",
		`null`:             "null",
		`true`:             "a boolean",
		`{"a":`:            "not valid JSON",
		`{"a":1} {"b":2}`:  "not valid JSON",
		"@/does/not/exist": "read --data file",
		`{"a":1e400}`:      "I-JSON",
		`{"a":1,"a":2}`:    "duplicate object key",
	}
	for in, want := range bad {
		_, err := readData(in, strings.NewReader(""))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("readData(%q) error = %v, want it to say %q", in, err, want)
		}
		if err != nil && !strings.HasPrefix(in, "@") && !strings.Contains(err.Error(), "JSON object") {
			t.Errorf("readData(%q) error %q does not say a JSON object is needed", in, err)
		}
	}
}

func TestWriteJSONLine(t *testing.T) {
	var b bytes.Buffer
	if err := writeJSONLine(&b, []byte("{\n \"a\" : 1\n}")); err != nil {
		t.Fatal(err)
	}
	if b.String() != "{\"a\":1}\n" {
		t.Errorf("got %q", b.String())
	}
}
