package schemas

import (
	"encoding/json"
	"testing"
)

func TestCanonicalJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":[true,false,null]}`, `{"a":[true,false,null],"b":1}`},
		{" {\n\"a\" : 1.50 , \"c\":{\"z\":1,\"y\":2}}\t", `{"a":1.50,"c":{"y":2,"z":1}}`},
		{`"\u00e9\u0041\/<>&\u2028"`, "\"éA/<>&\u2028\""},
		{`"\u0001\n"`, `"\u0001\n"`},
		{`1e3`, `1e3`},
		{`{}`, `{}`},
		{`[]`, `[]`},
	}
	for _, tt := range tests {
		got, err := canonicalJSON([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("canonicalJSON(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1}x`, `{"a":1,"a":1}`, `[1,]`, `{'a':1}`, `NaN`} {
		if got, err := canonicalJSON([]byte(bad)); err == nil {
			t.Errorf("canonicalJSON(%q) = %s, want error", bad, got)
		}
	}
}

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
