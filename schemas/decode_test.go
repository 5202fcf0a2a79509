package schemas

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDecodeGoldenBothModes(t *testing.T) {
	for name, r := range map[string]*kgo.Record{"structured": loadStructured(t), "binary": loadBinary(t)} {
		t.Run(name, func(t *testing.T) {
			r.Partition, r.Offset = 2, 1234
			c, err := DecodeCommand(r, 0)
			if err != nil {
				t.Fatal(err)
			}
			if c.ID != "cmd-7f3a" || c.Source != "urn:shop:refunds-ui" || c.Type != "payments.refund" ||
				c.Subject != "order-1042" || c.IdempotencyKey != "refund-1042" || c.TraceParent != validTP {
				t.Fatalf("attributes: %+v", c)
			}
			if c.ExpectedVersion == nil || *c.ExpectedVersion != 3 {
				t.Fatalf("expectedversion: %v", c.ExpectedVersion)
			}
			if c.Deadline == nil || !c.Deadline.Equal(time.Date(2025, 3, 1, 12, 5, 0, 0, time.UTC)) {
				t.Fatalf("deadline: %v", c.Deadline)
			}
			if c.Partition != 2 || c.Offset != 1234 {
				t.Fatalf("position: %d/%d", c.Partition, c.Offset)
			}
			// Both files carry the same data with different key order and
			// whitespace: the fingerprint is the same, and pinned.
			if c.Fingerprint != goldenFingerprint {
				t.Fatalf("fingerprint %s, want %s", c.Fingerprint, goldenFingerprint)
			}
			if c.Data[0] != '{' {
				t.Fatalf("data not trimmed: %q", c.Data)
			}
		})
	}
}

func TestDecodeStructuredValidation(t *testing.T) {
	long := strings.Repeat("k", 257)
	tests := []struct {
		name   string
		key    string
		mutate func(m map[string]any)
		reason string // substring; "" means valid
		entity string
	}{
		{"valid", "e1", func(m map[string]any) {}, "", ""},
		{"valid no key", "", func(m map[string]any) {}, "", ""},
		{"valid no data", "e1", func(m map[string]any) { delete(m, "data") }, "", ""},
		{"missing id", "e1", func(m map[string]any) { delete(m, "id") }, `missing required attribute "id"`, "e1"},
		{"missing source", "e1", func(m map[string]any) { delete(m, "source") }, `"source"`, "e1"},
		{"missing type", "e1", func(m map[string]any) { delete(m, "type") }, `missing required attribute "type"`, "e1"},
		{"missing subject", "k9", func(m map[string]any) { delete(m, "subject") }, `missing required attribute "subject"`, "k9"},
		{"missing subject no key", "", func(m map[string]any) { delete(m, "subject") }, `missing required attribute "subject"`, ""},
		{"key differs", "a", func(m map[string]any) {}, `record key "a" differs from subject "e1"`, "e1"},
		{"specversion 0.3", "e1", func(m map[string]any) { m["specversion"] = "0.3" }, `unsupported specversion "0.3"`, "e1"},
		{"specversion 2.0", "e1", func(m map[string]any) { m["specversion"] = "2.0" }, `specversion`, "e1"},
		{"no specversion", "e1", func(m map[string]any) { delete(m, "specversion") }, `specversion`, "e1"},
		{"idempotencykey empty", "e1", func(m map[string]any) { m["idempotencykey"] = "" }, "idempotency key is 0 bytes", "e1"},
		{"idempotencykey 256", "e1", func(m map[string]any) { m["idempotencykey"] = long[:256] }, "", ""},
		{"idempotencykey 257", "e1", func(m map[string]any) { m["idempotencykey"] = long }, "idempotency key is 257 bytes", "e1"},
		{"idempotencykey number", "e1", func(m map[string]any) { m["idempotencykey"] = 5 }, "must be a string", "e1"},
		{"default key too long", "e1", func(m map[string]any) { m["source"] = long }, "idempotency key is 260 bytes", "e1"},
		{"idempotencykey BEL", "e1", func(m map[string]any) { m["idempotencykey"] = "refund\a1042" }, "idempotency key is not printable UTF-8: control character U+0007 at byte 6", "e1"},
		{"idempotencykey NUL", "e1", func(m map[string]any) { m["idempotencykey"] = "\x00" }, "control character U+0000 at byte 0", "e1"},
		{"idempotencykey newline", "e1", func(m map[string]any) { m["idempotencykey"] = "k\n" }, "control character U+000A at byte 1", "e1"},
		{"idempotencykey tab", "e1", func(m map[string]any) { m["idempotencykey"] = "a\tb" }, "control character U+0009", "e1"},
		{"idempotencykey DEL", "e1", func(m map[string]any) { m["idempotencykey"] = "k\x7f" }, "control character U+007F", "e1"},
		{"idempotencykey C1", "e1", func(m map[string]any) { m["idempotencykey"] = "é\u0085" }, "control character U+0085 at byte 2", "e1"},
		{"idempotencykey 256 with control last", "e1", func(m map[string]any) { m["idempotencykey"] = long[:255] + "\x1f" }, "control character U+001F at byte 255", "e1"},
		{"default key with control", "e1", func(m map[string]any) { m["id"] = "c\x1b[0m" }, "idempotency key (default source/id) is not printable UTF-8: control character U+001B", "e1"},
		{"idempotencykey printable unicode", "e1", func(m map[string]any) { m["idempotencykey"] = "refund 1042/é/日本/🙂/\uFFFD/\u00a0" }, "", ""},
		{"expectedversion number", "e1", func(m map[string]any) { m["expectedversion"] = 7 }, "", ""},
		{"expectedversion zero", "e1", func(m map[string]any) { m["expectedversion"] = 0 }, "", ""},
		{"expectedversion string", "e1", func(m map[string]any) { m["expectedversion"] = "9000000000" }, "", ""},
		{"expectedversion negative", "e1", func(m map[string]any) { m["expectedversion"] = -1 }, "must be >= 0", "e1"},
		{"expectedversion fraction", "e1", func(m map[string]any) { m["expectedversion"] = 3.7 }, "not an integer", "e1"},
		{"expectedversion bool", "e1", func(m map[string]any) { m["expectedversion"] = true }, "must be an integer", "e1"},
		{"expectedversion junk string", "e1", func(m map[string]any) { m["expectedversion"] = "x" }, "not an integer", "e1"},
		{"deadline", "e1", func(m map[string]any) { m["deadline"] = "2025-03-01T12:05:00.5+02:00" }, "", ""},
		{"deadline bad", "e1", func(m map[string]any) { m["deadline"] = "tomorrow" }, `"deadline" is not an RFC 3339 time`, "e1"},
		{"traceparent bad", "e1", func(m map[string]any) { m["traceparent"] = "00-xyz" }, "traceparent", "e1"},
		{"traceparent upper", "e1", func(m map[string]any) { m["traceparent"] = strings.ToUpper(validTP) }, "traceparent", "e1"},
		{"traceparent zero trace", "e1", func(m map[string]any) {
			m["traceparent"] = "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
		}, "traceparent", "e1"},
		{"traceparent ok", "e1", func(m map[string]any) { m["traceparent"] = validTP }, "", ""},
		{"data array", "e1", func(m map[string]any) { m["data"] = []int{1} }, "data is not a JSON object", "e1"},
		{"data string", "e1", func(m map[string]any) { m["data"] = "x" }, "data is not a JSON object", "e1"},
		{"data null", "e1", func(m map[string]any) { m["data"] = nil }, "data is not a JSON object", "e1"},
		{"data not json content type", "e1", func(m map[string]any) { m["datacontenttype"] = "text/plain"; m["data"] = "hi" }, `datacontenttype "text/plain" is not JSON`, "e1"},
		{"data too big", "e1", func(m map[string]any) { m["data"] = map[string]string{"x": strings.Repeat("a", 600000)} }, "bytes, limit 524288", "e1"},
		{"data base64 object", "e1", func(m map[string]any) { delete(m, "data"); m["data_base64"] = "eyJhIjoxfQ==" }, "", ""},
		{"data base64 number", "e1", func(m map[string]any) { delete(m, "data"); m["data_base64"] = 1 }, "malformed", "e1"},
		{"bad extension name", "e1", func(m map[string]any) { m["bad-name"] = "x" }, "malformed", "e1"},
		{"id not string", "e1", func(m map[string]any) { m["id"] = 5 }, "malformed", "e1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := structuredAttrs()
			tt.mutate(m)
			c, err := DecodeCommand(structuredRecord(t, tt.key, m), 0)
			check(t, c, err, tt.reason, tt.entity)
		})
	}
}

func check(t *testing.T, c Command, err error, reason, entity string) {
	t.Helper()
	if reason == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		if c.ID == "" || c.Fingerprint == "" || c.IdempotencyKey == "" {
			t.Fatalf("incomplete command %+v", c)
		}
		return
	}
	if err == nil {
		t.Fatalf("accepted, want error containing %q", reason)
	}
	de := asDecodeError(t, err)
	if !contains(de.Reason, reason) {
		t.Fatalf("reason %q, want it to contain %q", de.Reason, reason)
	}
	if de.Entity != entity {
		t.Fatalf("entity %q, want %q", de.Entity, entity)
	}
}

func TestDecodeBinaryValidation(t *testing.T) {
	without := func(name string) []string {
		var out []string
		b := binaryBase()
		for i := 0; i < len(b); i += 2 {
			if b[i] != name {
				out = append(out, b[i], b[i+1])
			}
		}
		return out
	}
	with := func(kv ...string) []string { return append(binaryBase(), kv...) }
	obj := `{"a":1}`
	tests := []struct {
		name    string
		key     string
		value   string
		headers []string
		max     int
		reason  string
		entity  string
	}{
		{"valid", "e1", obj, binaryBase(), 0, "", ""},
		{"valid no data", "e1", "", binaryBase(), 0, "", ""},
		{"valid no content-type", "e1", obj, without("content-type"), 0, "", ""},
		{"valid mixed-case header names", "e1", obj, []string{"CE_SPECVERSION", "1.0", "Ce_Id", "c1", "ce_source", "s", "ce_type", "t", "ce_subject", "e1", "Content-Type", "application/json"}, 0, "", ""},
		{"not a cloudevent", "e1", obj, nil, 0, "not a CloudEvent", "e1"},
		{"not a cloudevent no key", "", obj, nil, 0, "not a CloudEvent", ""},
		{"specversion 0.3", "e1", obj, append(without("ce_specversion"), "ce_specversion", "0.3"), 0, `unsupported specversion "0.3"`, "e1"},
		{"specversion junk", "e1", obj, append(without("ce_specversion"), "ce_specversion", "9"), 0, `unsupported specversion "9"`, "e1"},
		{"missing id", "e1", obj, without("ce_id"), 0, `missing required attribute "id"`, "e1"},
		{"missing source", "e1", obj, without("ce_source"), 0, `missing required attribute "source"`, "e1"},
		{"missing type", "e1", obj, without("ce_type"), 0, `missing required attribute "type"`, "e1"},
		{"missing subject", "k", obj, without("ce_subject"), 0, `missing required attribute "subject"`, "k"},
		{"key differs", "a", obj, binaryBase(), 0, `record key "a" differs from subject "e1"`, "e1"},
		{"idempotencykey", "e1", obj, with("ce_idempotencykey", "k-1"), 0, "", ""},
		{"idempotencykey empty", "e1", obj, with("ce_idempotencykey", ""), 0, "idempotency key is 0 bytes", "e1"},
		{"idempotencykey too long", "e1", obj, with("ce_idempotencykey", strings.Repeat("x", 257)), 0, "257 bytes", "e1"},
		{"idempotencykey control", "e1", obj, with("ce_idempotencykey", "k\r\n1"), 0, "idempotency key is not printable UTF-8: control character U+000D at byte 1", "e1"},
		{"idempotencykey invalid UTF-8", "e1", obj, with("ce_idempotencykey", "k\xff1"), 0, "idempotency key is not printable UTF-8: invalid UTF-8 at byte 1", "e1"},
		{"idempotencykey truncated UTF-8", "e1", obj, with("ce_idempotencykey", "\xc3"), 0, "invalid UTF-8 at byte 0", "e1"},
		{"idempotencykey encoded U+FFFD", "e1", obj, with("ce_idempotencykey", "k\uFFFD"), 0, "", ""},
		{"default key invalid UTF-8", "e1", obj, append(without("ce_id"), "ce_id", "c\xfe"), 0, "idempotency key (default source/id) is not printable UTF-8: invalid UTF-8 at byte", "e1"},
		{"expectedversion", "e1", obj, with("ce_expectedversion", "12"), 0, "", ""},
		{"expectedversion big", "e1", obj, with("ce_expectedversion", "9000000000"), 0, "", ""},
		{"expectedversion negative", "e1", obj, with("ce_expectedversion", "-2"), 0, "must be >= 0", "e1"},
		{"expectedversion junk", "e1", obj, with("ce_expectedversion", "1.5"), 0, "not an integer", "e1"},
		{"deadline", "e1", obj, with("ce_deadline", "2025-03-01T12:05:00Z"), 0, "", ""},
		{"deadline bad", "e1", obj, with("ce_deadline", "2025-03-01 12:05"), 0, "RFC 3339", "e1"},
		{"traceparent", "e1", obj, with("ce_traceparent", validTP), 0, "", ""},
		{"traceparent future version", "e1", obj, with("ce_traceparent", "01"+validTP[2:]+"-extra"), 0, "", ""},
		{"traceparent ff", "e1", obj, with("ce_traceparent", "ff"+validTP[2:]), 0, "traceparent", "e1"},
		{"traceparent v00 extra", "e1", obj, with("ce_traceparent", validTP+"-x"), 0, "traceparent", "e1"},
		{"data array", "e1", "[1]", binaryBase(), 0, "data is not a JSON object", "e1"},
		{"data invalid", "e1", `{"a":`, binaryBase(), 0, "data is not a JSON object", "e1"},
		{"data trailing", "e1", `{"a":1} {}`, binaryBase(), 0, "data is not a JSON object", "e1"},
		{"data duplicate key", "e1", `{"a":1,"a":2}`, binaryBase(), 0, `duplicate object key "a"`, "e1"},
		{"data too big", "e1", `{"a":"` + strings.Repeat("x", 100) + `"}`, binaryBase(), 50, "data is 108 bytes, limit 50", "e1"},
		{"data not json", "e1", "hello", append(without("content-type"), "content-type", "text/plain"), 0, `datacontenttype "text/plain" is not JSON`, "e1"},
		{"bad time", "e1", obj, with("ce_time", "yesterday"), 0, "malformed binary event", "e1"},
		{"structured batch", "e1", "[]", []string{"content-type", "application/cloudevents-batch+json"}, 0, "batched", "e1"},
		{"structured unknown format", "e1", "x", []string{"content-type", "application/cloudevents+avro"}, 0, "unsupported event format", "e1"},
		{"structured not json", "e1", "{", []string{"Content-Type", "application/cloudevents+json"}, 0, "not valid JSON", "e1"},
		{"structured trailing", "e1", `{"specversion":"1.0","id":"1","source":"s","type":"t","subject":"e1"} x`, []string{"content-type", "application/cloudevents+json"}, 0, "not valid JSON", "e1"},
		{"structured charset param", "e1", `{"specversion":"1.0","id":"1","source":"s","type":"t","subject":"e1"}`, []string{"CONTENT-TYPE", "application/cloudevents+json; charset=UTF-8"}, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := DecodeCommand(binaryRecord(tt.key, tt.value, tt.headers...), tt.max)
			check(t, c, err, tt.reason, tt.entity)
		})
	}
}

func TestDecodeNil(t *testing.T) {
	_, err := DecodeCommand(nil, 0)
	asDecodeError(t, err)
}

func TestDecodeErrorMessage(t *testing.T) {
	e := &DecodeError{Reason: "r", Entity: "e"}
	if e.Error() != `invalid command for entity "e": r` {
		t.Fatal(e.Error())
	}
	if (&DecodeError{Reason: "r"}).Error() != "invalid command: r" {
		t.Fatal("no entity form")
	}
}

func TestDecodeDataIsCopied(t *testing.T) {
	r := binaryRecord("e1", `{"a":1}`, binaryBase()...)
	c, err := DecodeCommand(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.Value[2] = 'X'
	if string(c.Data) != `{"a":1}` {
		t.Fatalf("data aliases the record: %s", c.Data)
	}
}
