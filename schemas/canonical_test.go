package schemas

import (
	"encoding/json"
	"testing"
)

func TestFingerprint(t *testing.T) {
	fp := func(typ, subj, data string) string {
		t.Helper()
		var raw json.RawMessage
		if data != "" {
			raw = json.RawMessage(data)
		}
		s, err := Fingerprint(typ, subj, raw)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := fp("t", "e", `{"a":1,"b":{"c":[1,2]}}`)
	if len(base) != len("sha256:")+64 {
		t.Fatalf("format %s", base)
	}
	// Invariant under key order and whitespace.
	for _, same := range []string{`{"b":{"c":[1,2]},"a":1}`, "{ \"a\" : 1,\n \"b\": {\"c\": [1, 2]} }"} {
		if fp("t", "e", same) != base {
			t.Errorf("fingerprint differs for %s", same)
		}
	}
	// Sensitive to data, type, subject, and unambiguous framing.
	for name, other := range map[string]string{
		"data":       fp("t", "e", `{"a":2,"b":{"c":[1,2]}}`),
		"array":      fp("t", "e", `{"a":1,"b":{"c":[2,1]}}`),
		"type":       fp("u", "e", `{"a":1,"b":{"c":[1,2]}}`),
		"subject":    fp("t", "f", `{"a":1,"b":{"c":[1,2]}}`),
		"framing":    fp("te", "", `{"a":1,"b":{"c":[1,2]}}`),
		"no data":    fp("t", "e", ""),
		"empty data": fp("t", "e", `{}`),
	} {
		if other == base {
			t.Errorf("fingerprint ignores %s", name)
		}
	}
	if fp("t", "e", "") == fp("t", "e", "{}") {
		t.Error("absent data equals {}")
	}
	if _, err := Fingerprint("t", "e", json.RawMessage(`{`)); err == nil {
		t.Error("bad data accepted")
	}
}
