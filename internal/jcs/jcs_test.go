package jcs

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	gowebpki "github.com/gowebpki/jcs"
)

var canonSeeds = []string{
	`{"b":1,"a":[true,false,null]}`, " {\n\"a\" : 1.50 , \"c\":{\"z\":1,\"y\":2}}\t",
	`"\u00e9\u0041\/<>&\u2028"`, `"\u0001\n\b\f"`, `1e3`, `{}`, `[]`, `-0`, `0.0`, `1E-7`, `123456789012345678`,
	`{"a":1,"a":2}`, `"\ud800"`, `"\ud83d\ude00"`, `"\udc00\ud800x"`, "\"\xff\"", `{"\ud83d\ude00":1,"\ue000":2}`,
	`[1,]`, `{"a":1}x`, `NaN`, `1e400`, `{"hash":"x","a":1}`, `[[[[]]]]`, `{"a":{"b":[1,{"c":"d"}]}}`,
}

// FuzzCanonicalV1MatchesReference: the byte-level parser writes exactly
// what the round-1 encoding/json canonicalizer wrote, and fails where it
// failed, so no stored fingerprint changes.
func FuzzCanonicalV1MatchesReference(f *testing.F) {
	for _, s := range canonSeeds {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, strict bool) {
		got, err := CanonicalV1(in, strict)
		want, werr := canonicalReference(in, strict)
		if (err == nil) != (werr == nil) {
			t.Fatalf("canonical(%q, %v): err %v, reference err %v", in, strict, err, werr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("canonical(%q, %v) = %q, reference %q", in, strict, got, want)
		}
		// CanonicalData only refuses more (what is not I-JSON); what it
		// accepts has the v1 form and a JCS form.
		if d, derr := CanonicalData(in); derr == nil {
			if strict && (err != nil || !bytes.Equal(d, got)) {
				t.Fatalf("CanonicalData(%q) = %q, CanonicalV1 %q, %v", in, d, got, err)
			}
			if _, jerr := AppendCanonical(nil, in, Mode{JCS: true}); jerr != nil {
				t.Fatalf("CanonicalData(%q) accepted what has no JCS form: %v", in, jerr)
			}
		}
	})
}

// FuzzJCSMatchesLibrary: JCS agrees with gowebpki/jcs, a maintained
// RFC 8785 implementation, on every input both accept.
func FuzzJCSMatchesLibrary(f *testing.F) {
	for _, s := range canonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Canonical(in)
		if err != nil || !utf8Clean(in) {
			return
		}
		want, werr := gowebpki.Transform(in)
		if werr != nil {
			return // the library is stricter in places (e.g. top-level scalars)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Canonical(%q) = %q, gowebpki/jcs %q", in, got, want)
		}
	})
}

// utf8Clean: the library does not replace invalid UTF-8 or lone surrogates
// as encoding/json does, so those inputs are compared elsewhere.
func utf8Clean(in []byte) bool {
	return !bytes.Contains(in, []byte(`\u`)) && bytes.Equal(bytes.ToValidUTF8(in, nil), in)
}

func TestJCSVectors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		// RFC 8785 §3.2.2.3 and appendix B.
		{`[0, -0, 1.0, 1e21, 1e20, 1e-6, 1e-7, 0.1, 333333333.33333329, 1E30, 4.50, 2e-3, 0.000001, 9007199254740993]`,
			`[0,0,1,1e+21,100000000000000000000,0.000001,1e-7,0.1,333333333.3333333,1e+30,4.5,0.002,0.000001,9007199254740992]`},
		{`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{`"\u0008\u000c\u001f\u007f\u2028"`, "\"\\b\\f\\u001f\u007f\u2028\""},
		{`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
	} {
		got, err := Canonical([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonical(%s)\n got %s, %v\nwant %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`1e400`, `{"a":1,"a":2}`, `[1,]`, ``} {
		if got, err := Canonical([]byte(bad)); err == nil {
			t.Errorf("Canonical(%q) = %s, want error", bad, got)
		}
	}
}

func TestES6Numbers(t *testing.T) {
	for _, f := range []float64{1, -1, 0.1, 1e21, 1e-7, 123e-20, math.MaxFloat64, 5e-324, 1.5, 100, 1e6} {
		got := string(AppendES6Number(nil, f))
		back, err := strconv.ParseFloat(got, 64)
		if err != nil || back != f {
			t.Errorf("%v written as %s, reads back as %v (%v)", f, got, back, err)
		}
		want, _ := json.Marshal(f) // encoding/json also writes ES6 forms
		if got != string(want) {
			t.Errorf("%v: %s, encoding/json %s", f, got, want)
		}
	}
}

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
		got, err := CanonicalV1([]byte(tt.in), true)
		if err != nil || string(got) != tt.want {
			t.Errorf("canonicalJSON(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1}x`, `{"a":1,"a":1}`, `[1,]`, `{'a':1}`, `NaN`} {
		if got, err := CanonicalV1([]byte(bad), true); err == nil {
			t.Errorf("canonicalJSON(%q) = %s, want error", bad, got)
		}
	}
}

// CanonicalData refuses a number that is not an IEEE 754 double, which
// CanonicalV1 keeps as it is written, and a string that is not valid
// Unicode (a lone surrogate, invalid UTF-8), which CanonicalV1 writes as
// U+FFFD; otherwise it writes what CanonicalV1 writes.
func TestCanonicalDataIJSON(t *testing.T) {
	for _, bad := range []string{`1e400`, `{"a":[-1e400]}`, `1` + strings.Repeat("0", 309), `{"a":1,"a":1}`} {
		if got, err := CanonicalData([]byte(bad)); err == nil {
			t.Errorf("CanonicalData(%.40q) = %.40s, want error", bad, got)
		}
	}
	for _, bad := range []string{`"\ud800"`, `"x\udfff"`, `"\udc00\ud800"`, `"\ud800\u0041"`, "\"\xff\"", "{\"\xc3\":1}", `{"\ud83d":1}`} {
		if got, err := CanonicalData([]byte(bad)); err == nil {
			t.Errorf("CanonicalData(%q) = %q, want error", bad, got)
		}
	}
	for _, s := range []string{`{"b":1.50,"a":1e308}`, `1e-400`, `123456789012345678901234567890`, `-0`, `[0.1,2E+3]`,
		`"\ud83d\ude00\ufffd"`, "\"\xef\xbf\xbd\"", `"\u00e9\n"`} {
		want, err := CanonicalV1([]byte(s), true)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := CanonicalData([]byte(s)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("CanonicalData(%s) = %s, %v; want %s", s, got, err, want)
		}
	}
}

// FuzzCanonicalJSON: canonicalization is idempotent, and its output is valid JSON.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2.0,"x\u0000"]}`, `"\ud800"`, `[{"a":{"b":null}}]`, `-0.0e+1`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c1, err := CanonicalV1(in, true)
		if err != nil {
			return
		}
		c2, err := CanonicalV1(c1, true)
		if err != nil {
			t.Fatalf("canonical output rejected: %q: %v", c1, err)
		}
		if !bytes.Equal(c1, c2) {
			t.Fatalf("not idempotent:\n%q\n%q", c1, c2)
		}
	})
}
