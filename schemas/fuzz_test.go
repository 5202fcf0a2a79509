package schemas

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/jcs"
)

// encodeHeaders packs headers as "key\x00value\n" lines: the fuzzer mutates
// one blob and parseHeaders turns any bytes back into headers.
func encodeHeaders(hs []kgo.RecordHeader) []byte {
	var b bytes.Buffer
	for _, h := range hs {
		b.WriteString(h.Key)
		b.WriteByte(0)
		b.Write(h.Value)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func parseHeaders(blob []byte) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for _, line := range bytes.Split(blob, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		k, v, _ := bytes.Cut(line, []byte{0})
		hs = append(hs, kgo.RecordHeader{Key: string(k), Value: v})
	}
	return hs
}

// FuzzDecodeCommand checks DecodeCommand's contract on arbitrary key, value
// and headers. Invariants: it never panics; it returns either a Command with
// non-empty ID, Type, Subject, a 1–256 byte IdempotencyKey of printable
// UTF-8 (no control characters) and a Fingerprint, or a *DecodeError with a non-empty Reason (and never both).
func FuzzDecodeCommand(f *testing.F) {
	for _, r := range []*kgo.Record{loadStructured(f), loadBinary(f)} {
		f.Add(r.Key, r.Value, encodeHeaders(r.Headers))
	}
	f.Add([]byte("e1"), []byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","subject":"e1","data_base64":1}`), encodeHeaders(structuredHeaders()))
	f.Add([]byte(nil), []byte(`{"a":1}`), encodeHeaders(binaryRecord("", "", binaryBase()...).Headers))
	f.Add([]byte("e1"), []byte(`{"a":1}`), encodeHeaders(binaryRecord("", "", append(binaryBase(), "ce_idempotencykey", "k\x07\xff")...).Headers))
	f.Add([]byte("e1"), []byte(`{"a":[1e400]}`), encodeHeaders(binaryRecord("", "", binaryBase()...).Headers))
	f.Fuzz(func(t *testing.T, key, value, headerBlob []byte) {
		r := &kgo.Record{Key: key, Value: value, Headers: parseHeaders(headerBlob)}
		c, err := DecodeCommand(r, 1<<16)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.Reason == "" {
				t.Fatalf("error %v (%T) is not a *DecodeError with a reason", err, err)
			}
			if c.ID != "" || c.Fingerprint != "" {
				t.Fatalf("error with a command: %+v", c)
			}
			return
		}
		if c.ID == "" || c.Type == "" || c.Subject == "" || c.Fingerprint == "" ||
			len(c.IdempotencyKey) < 1 || len(c.IdempotencyKey) > maxIdempotencyKeyBytes {
			t.Fatalf("incomplete command: %+v", c)
		}
		if !utf8.ValidString(c.IdempotencyKey) || strings.ContainsFunc(c.IdempotencyKey, unicode.IsControl) {
			t.Fatalf("idempotency key %q is not printable UTF-8", c.IdempotencyKey)
		}
		if len(key) > 0 && string(key) != c.Subject {
			t.Fatalf("key %q accepted with subject %q", key, c.Subject)
		}
		if len(c.Data) > 0 {
			if _, err := jcs.CanonicalV1(c.Data, true); err != nil {
				t.Fatalf("accepted data is not canonicalizable: %v", err)
			}
			// Its record is hashed over its RFC 8785 form.
			if _, err := jcs.AppendCanonical(nil, c.Data, jcs.Mode{JCS: true}); err != nil {
				t.Fatalf("accepted data has no RFC 8785 form: %v", err)
			}
		}
	})
}

// FuzzDecodeCommandChecked: DecodeCommandChecked fails exactly where
// DecodeCommand fails, with the same error, and otherwise returns its
// command without Data and Fingerprint, for any key, value and headers
// (the seeds: FuzzDecodeCommand's and the structured fast path's).
func FuzzDecodeCommandChecked(f *testing.F) {
	for _, r := range []*kgo.Record{loadStructured(f), loadBinary(f)} {
		f.Add(r.Key, r.Value, encodeHeaders(r.Headers))
	}
	f.Add([]byte(nil), []byte(`{"a":1}`), encodeHeaders(binaryRecord("", "", binaryBase()...).Headers))
	f.Add([]byte(nil), []byte(`{"a":1,"a":2}`), encodeHeaders(binaryRecord("", "", binaryBase()...).Headers))
	f.Add([]byte(nil), []byte(`[1]`), encodeHeaders(binaryRecord("", "", binaryBase()...).Headers))
	f.Add([]byte(nil), []byte(strings.Repeat("[", 600)), encodeHeaders(binaryRecord("", "", binaryBase()...).Headers))
	for _, s := range fastSeeds {
		f.Add([]byte("e1"), []byte(s), encodeHeaders(structuredHeaders()))
	}
	f.Fuzz(func(t *testing.T, key, value, headerBlob []byte) {
		r := &kgo.Record{Key: key, Value: value, Headers: parseHeaders(headerBlob)}
		want, wantErr := DecodeCommand(r, 1<<10)
		got, err := DecodeCommandChecked(r, 1<<10)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("errors differ:\nchecked: %v\nwhole:   %v", err, wantErr)
		}
		if wantErr == nil && (want.Fingerprint == "" || got.Fingerprint != "" || got.Data != nil) {
			t.Fatalf("fingerprint %q, data %q: want the whole decode's fingerprint set and the checked one's empty", want.Fingerprint, got.Data)
		}
		want.Data, want.Fingerprint = nil, ""
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("commands differ:\nchecked: %+v\nwhole:   %+v", got, want)
		}
	})
}

// BenchmarkDecodeCommand: the fixtures (the structured one has a numeric
// expectedversion, which the fast path leaves to sdk-go), and the
// benchmark's commands (onceflight-bench: structured, 200-byte data)
// with and without the fast path, with data in canonical form or not.
func BenchmarkDecodeCommand(b *testing.B) {
	bench, err := EncodeCommand(Command{ID: "n-1", Source: "onceflight-bench", Type: "bench.noop", Subject: "e-1", IdempotencyKey: "k-1",
		Data: []byte(`{"pad":"` + strings.Repeat("x", 180) + `","n":1}`)}, Structured)
	if err != nil {
		b.Fatal(err)
	}
	// What onceflight-bench sends today (benchData): data already in
	// canonical form, an idempotency key of its own.
	canonical, err := EncodeCommand(Command{ID: "n-104211", Source: "onceflight-bench", Type: "bench.noop", Subject: "e-4211", IdempotencyKey: "k-104211",
		Data: []byte(`{"amount":1,"pad":"` + strings.Repeat("x", 179) + `"}`)}, Structured)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    *kgo.Record
		fast bool
	}{{"structured", loadStructured(b), true}, {"binary", loadBinary(b), true}, {"bench", bench, true}, {"bench-sdk", bench, false}, {"bench-canonical", canonical, true}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeCommand(c.r, 0, c.fast); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fastSeeds are structured command events around the fast path's shape:
// what producers write, and near misses it must leave to sdk-go.
var fastSeeds = []string{
	`{"specversion":"1.0","id":"n-1","source":"onceflight-bench","type":"bench.noop","subject":"e-1","datacontenttype":"application/json","data":{"a":"xx"},"idempotencykey":"k-1"}`,
	`{"specversion":"1.0","id":"c1","source":"urn:a:b","type":"t","subject":"e1","time":"2025-03-01T12:00:00Z","data":{"b":1,"a":[1,2.0]},"deadline":"2025-03-01T12:05:00Z","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","expectedversion":"7"}`,
	` {"data":{},"subject":"e1","type":"t","source":"s","id":"1","specversion":"1.0"} `,
	`{"specversion":"1.0","id":"c\u0031","source":"s","type":"t","subject":"e1","data":{}}`,
	`{"specversion":"1.0","id":"c1","id":"c2","source":"s","type":"t","subject":"e1"}`,
	`{"specversion":"1.0","id":"c1","source":"HTTP://X/a b","type":"t","subject":"e1"}`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","time":"yesterday"}`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","data":{"a":1,"a":2}}`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","expectedversion":3}`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","datacontenttype":"text/plain","data":"x"}`,
	`{"specversion":"1.0","id":"","source":"s","type":"t","subject":"e1"}`,
	`{"specversion":"0.3","id":"c1","source":"s","type":"t","subject":"e1"}`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","idempotencykey":"k\u0007"}`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"é","data":{"x":"\ud800"}} x`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","data":{"x":1e400}}`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","idempotencykey":"k1","IdempotencyKey":"k2"}`,
	`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","idempotencykey":"k\udbff","data":5}`,
}

// FuzzStructuredFastMatchesSDK: DecodeCommand with the structured fast
// path (structuredFast) returns exactly what it returns through sdk-go —
// the same command or the same error — for any value and record key.
func FuzzStructuredFastMatchesSDK(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte("e1"), []byte(s))
		f.Add([]byte(nil), []byte(s))
	}
	f.Add([]byte("order-1042"), loadStructured(f).Value)
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r := &kgo.Record{Key: key, Value: value, Headers: structuredHeaders()}
		fastCmd, fastErr := decodeCommand(r, 1<<16, true)
		sdkCmd, sdkErr := decodeCommand(r, 1<<16, false)
		// Where the fast path declines, both errors come from sdk-go,
		// whose message can name any of several bad members (it walks a
		// map): only whether it failed must match.
		_, answered := structuredFast(value)
		if (fastErr == nil) != (sdkErr == nil) || answered && fmt.Sprint(fastErr) != fmt.Sprint(sdkErr) {
			t.Fatalf("errors differ (fast path answered: %v):\nfast: %v\nsdk:  %v", answered, fastErr, sdkErr)
		}
		if !reflect.DeepEqual(fastCmd, sdkCmd) {
			t.Fatalf("commands differ:\nfast: %+v\nsdk:  %+v", fastCmd, sdkCmd)
		}
	})
}

// TestStructuredFastAnswers: the fast path answers for what producers
// write (EncodeCommand's structured mode, the benchmark's commands), not
// only leaves everything to sdk-go, and declines the near misses.
func TestStructuredFastAnswers(t *testing.T) {
	r, err := EncodeCommand(Command{ID: "n-1", Source: "onceflight-bench", Type: "bench.noop", Subject: "e-1", IdempotencyKey: "k-1",
		Data: []byte(`{"b":"x","a":1}`), TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, Structured)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range [][]byte{r.Value, []byte(fastSeeds[0]), []byte(fastSeeds[1]), []byte(fastSeeds[2])} {
		if _, ok := structuredFast(v); !ok {
			t.Errorf("fast path declined %s", v)
		}
	}
	for _, s := range fastSeeds[3:] {
		if _, ok := structuredFast([]byte(s)); ok {
			t.Errorf("fast path answered %s", s)
		}
	}
}

// BenchmarkOutcomeID: the id of every outcome the executor publishes.
func BenchmarkOutcomeID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if OutcomeID("key-0001234", StatusSucceeded, "cmd-0001234") == "" {
			b.Fatal("empty id")
		}
	}
}

// skipValid finds the end of any member's value in valid JSON: what
// follows it is the member's end (',' or '}', spaces aside).
func TestSkipValid(t *testing.T) {
	for _, v := range []string{`5`, `-1.5e3`, `true`, `null`, `"x"`, `"a\"}]"`, `"\\"`, `{}`, `[]`, `{"a":[1,{"b":"}"}],"c":"]"}`, `[[],[[]],"[",{"x":{}}]`} {
		for _, tail := range []string{`}`, `,"b":1}`, ` }`, "\n,\"b\":2}"} {
			src := `{"data":` + v + tail
			if got, want := skipValid([]byte(src), len(`{"data":`)), len(`{"data":`)+len(v); got != want {
				t.Errorf("skipValid(%s) = %d, want %d", src, got, want)
			}
		}
	}
}
