package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/schemas"
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
		if err != nil && exitCode(err) != exitUsage {
			t.Errorf("readData(%q) error %q exits %d, want %d: a bad --data is a usage error", in, err, exitCode(err), exitUsage)
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

// The key submit prints is the one the executor uses, whatever --source
// is: an empty --source leaves the client's default source on the
// command, so a key derived from the flag ("/ID") names nothing.
func TestSubmitPrintsTheExecutorsKey(t *testing.T) {
	seen := make(chan schemas.Command, 4)
	_, addr, _ := startEnv(t, seen)
	for _, source := range []string{"", "shop"} {
		code, out, errOut := runCLI("submit", "--brokers", addr, "--action", "a", "--entity", "e", "--source", source, "--data", `{"ignore":true}`)
		if code != exitOK {
			t.Fatalf("--source %q: exit %d, stderr %q", source, code, errOut)
		}
		var printed struct{ Key string }
		if err := json.Unmarshal([]byte(out), &printed); err != nil {
			t.Fatalf("--source %q: printed %q: %v", source, out, err)
		}
		if c := <-seen; printed.Key != c.IdempotencyKey {
			t.Errorf("--source %q: printed key %q, the executor's key is %q", source, printed.Key, c.IdempotencyKey)
		}
	}
}

// An interrupted `submit --wait` says the command was published, and
// where, as the timeout does: the command may still be executed.
func TestSubmitWaitInterruptedSaysPublished(t *testing.T) {
	seen := make(chan schemas.Command, 1)
	ctx, addr, _ := startEnv(t, seen)
	ictx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	go func() {
		<-seen // published; the fake executor will not answer it
		interrupt()
	}()
	code, _, errOut := execCLI(ictx, "submit", "--brokers", addr, "--action", "a", "--entity", "e", "--key", "k-int", "--wait", "--data", `{"ignore":true}`)
	if code != exitError || !strings.Contains(errOut, "it was published (partition ") || !strings.Contains(errOut, "k-int") {
		t.Fatalf("interrupted submit --wait: exit %d, stderr %q; want it to say the command was published", code, errOut)
	}
}
