package schemas_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/onceflight/onceflight/internal/wire"
	. "github.com/onceflight/onceflight/schemas"
)

func htmlRecord() Record {
	rec := testRecord()
	rec.Data = json.RawMessage(`{"html":"<a href=\"x\">&amp;</a>","u":"\u2028 é"}`)
	rec.Result = json.RawMessage(`{"b":"<b>&</b>"}`)
	rec.Error = &Error{Code: "x", Message: "a < b && c > d"}
	return rec
}

// Records are written without HTML escaping: '<', '>' and '&' stay one
// byte each, and the record reads back the same.
func TestMarshalRecordNoHTMLEscape(t *testing.T) {
	rec := htmlRecord()
	b, err := wire.MarshalRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<a href=\"x\">&amp;</a>`, `"<b>&</b>"`, `"a < b && c > d"`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Fatalf("%s not raw in %s", want, b)
		}
	}
	if bytes.Contains(b, []byte(`\u003c`)) || bytes.Contains(b, []byte(`\u0026`)) || bytes.HasSuffix(b, []byte("\n")) {
		t.Fatalf("escaped or newline-terminated: %s", b)
	}
	if !json.Valid(b) {
		t.Fatalf("invalid JSON: %s", b)
	}
	back, err := UnmarshalRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	// Data and result come back in canonical form: the same bytes again.
	again, err := wire.MarshalRecord(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Fatalf("round trip\n%s\nwant\n%s", again, b)
	}
	back.Data, back.Result, rec.Data, rec.Result = nil, nil, nil, nil
	if !reflect.DeepEqual(back, rec) {
		t.Fatalf("round trip\n%+v\nwant\n%+v", back, rec)
	}
}

// Round-1 hashes (LegacyHashRecord, which audit still accepts) are
// computed over their canonical form, so dropping HTML escaping changed
// none. These values were computed with the json.Marshal encoding.
func TestLegacyHashRecordUnchangedByEscaping(t *testing.T) {
	for _, c := range []struct {
		rec  Record
		want string
	}{
		{testRecord(), "sha256:3bac3944ffbc9e5f09277cddc17e0c2e710b4598cd29012e6bd1093a9076b098"},
		{htmlRecord(), "sha256:8a57f3bcb33080501856298461c828ef3ce138966c2e7558adcda4c2dd8040bf"},
	} {
		h, err := wire.LegacyHashRecord("sha256:prev", c.rec)
		if err != nil {
			t.Fatal(err)
		}
		if h != c.want {
			t.Fatalf("hash of %q changed: %s, want %s", c.rec.IdempotencyKey, h, c.want)
		}
	}
}

// The outcome event embeds the record unescaped too (sdk-go's SetData would
// re-escape it through json.Marshal), and decodes back to it.
func TestEncodeOutcomeNoHTMLEscape(t *testing.T) {
	rec := htmlRecord()
	r, err := wire.EncodeOutcome(rec, "cmd-7f3a", false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(r.Value, []byte(`<a href=\"x\">&amp;</a>`)) || bytes.Contains(r.Value, []byte(`\u003c`)) {
		t.Fatalf("outcome escaped: %s", r.Value)
	}
	o, err := DecodeOutcome(r)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := wire.MarshalRecord(rec)
	got, _ := wire.MarshalRecord(o.Record)
	if canon(t, got) != canon(t, want) {
		t.Fatalf("round trip\n%s\nwant\n%s", got, want)
	}
}
