package httpconn

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
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
