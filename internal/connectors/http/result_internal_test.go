package httpconn

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/internal/jcs"
)

// marshalResult is result as it was first written, with json.Marshal of
// a struct: the written-out version must give the same bytes, which the
// journal and the outcomes keep.
func marshalResult(status int, raw []byte, truncated bool) []byte {
	out := struct {
		Status    int  `json:"http_status"`
		Body      any  `json:"body,omitempty"`
		Truncated bool `json:"body_truncated,omitempty"`
	}{Status: status, Truncated: truncated}
	if len(bytes.TrimSpace(raw)) > 0 {
		var compact bytes.Buffer
		if !truncated && json.Compact(&compact, raw) == nil {
			out.Body = json.RawMessage(compact.Bytes())
		} else {
			out.Body = strings.ToValidUTF8(string(raw), "\uFFFD")
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err)
	}
	return b
}

func TestResultBytesAsMarshal(t *testing.T) {
	c := &Connector{}
	bodies := []string{
		``, `   `, "\n\t", `{}`, `{"ok":true}`, ` { "a" : [1, 2 , {"b":null}] } `,
		`{"html":"<a href=\"x\">&amp;</a>"}`, "{\"sep\":\"\u2028\u2029\"}", `"just a string"`, `42`,
		`not json`, `<html>oops & more</html>`, "bad utf-8 \xff\xfe here", "{\"bad\":\"\xff\"}",
		`{"unterminated":`, "line\u2028sep", `{"emoji":"😀","esc":"\u00e9\n"}`,
		"{\"ellipsis\":\"a\u2026b\"}", ` {"a" : "<"} `, ` [ "x" , "\u2029" ] `,
	}
	for _, body := range bodies {
		for _, truncated := range []bool{false, true} {
			for _, status := range []int{200, 201, 204} {
				got, want := c.result(status, []byte(body), truncated), marshalResult(status, []byte(body), truncated)
				if !bytes.Equal(got, want) {
					t.Errorf("result(%d, %q, %v)\n got %s\nwant %s", status, body, truncated, got, want)
				}
				if !json.Valid(got) {
					t.Errorf("result(%d, %q, %v) = %s: not JSON", status, body, truncated, got)
				}
			}
		}
	}
}

// A JSON body without an RFC 8785 form (a number beyond an IEEE 754
// double, nesting deeper than jcs follows) is kept as a string: kept as
// JSON, the succeeded record could not be hashed, and the committer
// dropped it and its outcome, leaving an effect that happened without a
// final record. Every result has an RFC 8785 form.
func TestResultHasRecordForm(t *testing.T) {
	c := &Connector{}
	deep := strings.Repeat("[", 600) + strings.Repeat("]", 600)
	for _, body := range []string{`{"x":1e400}`, `{"a":[-1e999]}`, deep, `{"ok":1e308}`, `{"b":1,"a":2.50}`} {
		got := c.result(200, []byte(body), false)
		if _, err := jcs.AppendCanonical(nil, got, jcs.Mode{JCS: true}); err != nil {
			t.Errorf("result(%.20q) = %.60s: no RFC 8785 form: %v", body, got, err)
			continue
		}
		var r struct{ Body any }
		if err := json.Unmarshal(got, &r); err != nil {
			t.Fatal(err)
		}
		_, isString := r.Body.(string)
		if want := body == deep || strings.Contains(body, "e4") || strings.Contains(body, "e9"); isString != want {
			t.Errorf("result(%.20q) = %.60s: body as a string %v, want %v", body, got, isString, want)
		}
	}
}
