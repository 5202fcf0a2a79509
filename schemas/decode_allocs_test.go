package schemas

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDecodeCommandAllocs: a command as producers write it (structured,
// canonical data, an idempotency key of its own) costs the strings and
// bytes the Command keeps — id, subject, key, a copy of the data, the
// fingerprint — and nothing else: no sdk-go message, no interface per
// extension, no canonical copy of data that is canonical already, no
// string of a source or type seen on the previous command.
func TestDecodeCommandAllocs(t *testing.T) {
	r, err := EncodeCommand(Command{ID: "n-1", Source: "onceflight-bench", Type: "bench.noop", Subject: "e-1", IdempotencyKey: "k-1",
		Data: []byte(`{"amount":1,"pad":"` + strings.Repeat("x", 179) + `"}`)}, Structured)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeCommand(r, 0); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeCommand(r, 0) }); n > 5 {
		t.Errorf("DecodeCommand: %.0f allocations, want at most 5", n)
	}
}

// TestDecodeSharesSourceAndType: consecutive commands with the same
// source and type share those strings; a different source is checked
// again (the fast path still declines one sdk-go would print otherwise).
func TestDecodeSharesSourceAndType(t *testing.T) {
	event := func(source string) *kgo.Record {
		return &kgo.Record{Headers: structuredHeaders(), Value: []byte(`{"specversion":"1.0","id":"c1","source":"` + source +
			`","type":"t.x","subject":"e1","data":{}}`)}
	}
	a, err := DecodeCommand(event("urn:a:b"), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeCommand(event("urn:a:b"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(a.Source) != unsafe.StringData(b.Source) || unsafe.StringData(a.Type) != unsafe.StringData(b.Type) {
		t.Errorf("source and type of the second command are new strings")
	}
	if _, ok := structuredFast(event("HTTP://X/a b").Value); ok {
		t.Errorf("fast path answered a source sdk-go does not print back")
	}
	if _, ok := structuredFast(event("urn:a:b").Value); !ok {
		t.Errorf("fast path declined a source it accepted before")
	}
}
