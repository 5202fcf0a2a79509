package schemas

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
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
			len(c.IdempotencyKey) < 1 || len(c.IdempotencyKey) > MaxIdempotencyKeyBytes {
			t.Fatalf("incomplete command: %+v", c)
		}
		if !utf8.ValidString(c.IdempotencyKey) || strings.ContainsFunc(c.IdempotencyKey, unicode.IsControl) {
			t.Fatalf("idempotency key %q is not printable UTF-8", c.IdempotencyKey)
		}
		if len(key) > 0 && string(key) != c.Subject {
			t.Fatalf("key %q accepted with subject %q", key, c.Subject)
		}
		if len(c.Data) > 0 {
			if _, err := CanonicalJSON(c.Data); err != nil {
				t.Fatalf("accepted data is not canonicalizable: %v", err)
			}
		}
	})
}

// FuzzCanonicalJSON: canonicalization is idempotent, and its output is valid JSON.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2.0,"x\u0000"]}`, `"\ud800"`, `[{"a":{"b":null}}]`, `-0.0e+1`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c1, err := CanonicalJSON(in)
		if err != nil {
			return
		}
		c2, err := CanonicalJSON(c1)
		if err != nil {
			t.Fatalf("canonical output rejected: %q: %v", c1, err)
		}
		if !bytes.Equal(c1, c2) {
			t.Fatalf("not idempotent:\n%q\n%q", c1, c2)
		}
	})
}

func BenchmarkDecodeCommand(b *testing.B) {
	for name, r := range map[string]*kgo.Record{"structured": loadStructured(b), "binary": loadBinary(b)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeCommand(r, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
