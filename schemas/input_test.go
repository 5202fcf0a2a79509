package schemas_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	. "github.com/onceflight/onceflight/schemas"
)

// inputRecord is a command record carrying data, in either mode, with no
// other attribute than the required ones.
func inputRecord(t *testing.T, mode Mode, data string) *kgo.Record {
	t.Helper()
	var r *kgo.Record
	if mode == Binary {
		r = &kgo.Record{Key: []byte("e1"), Value: []byte(data)}
		for _, kv := range [][2]string{{"ce_specversion", "1.0"}, {"ce_id", "c1"}, {"ce_source", "s"}, {"ce_type", "t"}, {"ce_subject", "e1"}, {"content-type", "application/json"}} {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
		}
		return r
	}
	return &kgo.Record{Key: []byte("e1"),
		Value:   []byte(`{"specversion":"1.0","id":"c1","source":"s","type":"t","subject":"e1","data":` + data + `}`),
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
}

// A number beyond IEEE 754 doubles in a command's data is refused at
// decode, in both modes: the command's record is hashed over its RFC 8785
// form, which such a number has none of, so an accepted one could never
// be written, and the executor retried it forever with its partition
// stuck behind it. What is accepted has a record that encodes.
func TestDecodeDataNumbersAreDoubles(t *testing.T) {
	huge := "1" + strings.Repeat("0", 400)
	for _, mode := range []Mode{Binary, Structured} {
		for _, data := range []string{`{"x":1e400}`, `{"x":-1e400}`, `{"x":[` + huge + `]}`, `{"x":{"y":1.5e309}}`} {
			c, err := DecodeCommand(inputRecord(t, mode, data), 0)
			if err == nil {
				_, merr := wire.MarshalRecord(Record{IdempotencyKey: c.IdempotencyKey, Entity: c.Subject, Status: StatusInProgress, Data: c.Data})
				t.Errorf("%v %s: accepted (its record's encoding: %v)", mode, data, merr)
				continue
			}
			if !strings.Contains(err.Error(), "e1") {
				t.Errorf("%v %s: %v does not name the entity", mode, data, err)
			}
		}
		// Numbers that are doubles, however written, still pass.
		for _, data := range []string{`{"x":1e308}`, `{"x":1e-400}`, `{"x":123456789012345678901234567890}`, `{"x":-0.0}`} {
			c, err := DecodeCommand(inputRecord(t, mode, data), 0)
			if err != nil {
				t.Errorf("%v %s: %v", mode, data, err)
				continue
			}
			if _, err := wire.MarshalRecord(Record{IdempotencyKey: c.IdempotencyKey, Entity: c.Subject, Status: StatusInProgress, Data: c.Data}); err != nil {
				t.Errorf("%v %s: accepted, but its record does not encode: %v", mode, data, err)
			}
		}
	}
}

// A string in a command's data that is not valid Unicode — an escaped
// lone surrogate, a byte that is not UTF-8 — is refused at decode, in
// both modes: decoded, each became U+FFFD, so "\ud800", "\udfff", a raw
// 0xff and "\ufffd" — different strings to a producer — had one
// fingerprint (the same key with other data was taken for a repeat)
// and one record hash. A surrogate pair and "\ufffd" itself still pass.
func TestDecodeDataStringsAreUnicode(t *testing.T) {
	for _, mode := range []Mode{Binary, Structured} {
		for _, data := range []string{`{"x":"\ud800"}`, `{"x":"a\udfffb"}`, `{"x":"\udc00\ud800"}`, "{\"x\":\"\xff\"}", "{\"\xfe\":1}", `{"\ud800":1}`} {
			if c, err := DecodeCommand(inputRecord(t, mode, data), 0); err == nil {
				t.Errorf("%v %q: accepted, fingerprint %s", mode, data, c.Fingerprint)
			} else if !strings.Contains(err.Error(), "e1") {
				t.Errorf("%v %q: %v does not name the entity", mode, data, err)
			}
		}
		for _, data := range []string{`{"x":"\ufffd"}`, `{"x":"\ud83d\ude00"}`, "{\"x\":\"\xef\xbf\xbd é\"}"} {
			if _, err := DecodeCommand(inputRecord(t, mode, data), 0); err != nil {
				t.Errorf("%v %q: %v", mode, data, err)
			}
		}
	}
}

// A structured command event that names one attribute twice — exactly,
// with escapes, or in other case (sdk-go folds extension names) — is
// refused: sdk-go kept the last, a reader that keeps the first would read
// another entity, key, id or data. So is one with a string that is not
// valid Unicode in an attribute ("\ud800" and "\udbff" were one key).
func TestDecodeStructuredOneReading(t *testing.T) {
	base := `"specversion":"1.0","source":"s","type":"t"`
	for _, v := range []string{
		`{` + base + `,"id":"a","subject":"e1","subject":"e2"}`,
		`{` + base + `,"id":"a","id":"b","subject":"e1"}`,
		`{` + base + `,"id":"a","\u0069d":"b","subject":"e1"}`,
		`{` + base + `,"id":"a","subject":"e1","idempotencykey":"k1","idempotencykey":"k2"}`,
		`{` + base + `,"id":"a","subject":"e1","idempotencykey":"k1","IdempotencyKey":"k2"}`,
		`{` + base + `,"id":"a","subject":"e1","deadline":"2030-01-01T00:00:00Z","DEADLINE":"2020-01-01T00:00:00Z"}`,
		`{` + base + `,"id":"a","subject":"e1","data":{"x":1},"data":{"x":2}}`,
		`{` + base + `,"id":"a","subject":"e1","expectedversion":1,"expectedversion":2}`,
		`{` + base + `,"id":"a","subject":"e1","idempotencykey":"k\ud800"}`,
		`{` + base + `,"id":"a\udbff","subject":"e1"}`,
	} {
		r := &kgo.Record{Key: []byte("e1"), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
		if c, err := DecodeCommand(r, 0); err == nil {
			t.Errorf("%s: accepted as id %q, subject %q, key %q, data %s", v, c.ID, c.Subject, c.IdempotencyKey, c.Data)
		} else if !strings.Contains(err.Error(), `"e1"`) {
			t.Errorf("%s: %v does not name the entity", v, err)
		}
	}
}

// A record that carries a header the CloudEvents binding reads twice
// (case aside) is refused, in either mode: sdk-go's binary reader kept
// the last ce_ header and the error's entity came from the first; the
// mode is decided by the first content-type.
func TestDecodeRepeatedHeader(t *testing.T) {
	for _, extra := range [][2]string{
		{"ce_subject", "e2"}, {"CE_SUBJECT", "e2"}, {"ce_id", "c2"}, {"ce_idempotencykey", "k2"},
		{"content-type", "application/json"}, {"Content-Type", "application/cloudevents+json"}, {"ce_specversion", "1.0"},
	} {
		for _, mode := range []Mode{Binary, Structured} {
			r := inputRecord(t, mode, `{"a":1}`)
			r.Key = []byte(extra[1])
			if !strings.HasPrefix(extra[1], "e") {
				r.Key = nil
			}
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "ce_idempotencykey", Value: []byte("k1")}, kgo.RecordHeader{Key: extra[0], Value: []byte(extra[1])})
			if mode == Structured && !bindingRepeat(r.Headers) {
				continue
			}
			c, err := DecodeCommand(r, 0)
			if err == nil {
				t.Errorf("%v with %s twice: accepted as id %q, subject %q, key %q", mode, extra[0], c.ID, c.Subject, c.IdempotencyKey)
			} else if !strings.Contains(err.Error(), "more than once") {
				t.Errorf("%v with %s twice: %v", mode, extra[0], err)
			}
		}
	}
	// Other headers may repeat.
	r := inputRecord(t, Binary, `{"a":1}`)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: "x-trace", Value: []byte("1")}, kgo.RecordHeader{Key: "x-trace", Value: []byte("2")})
	if _, err := DecodeCommand(r, 0); err != nil {
		t.Error(err)
	}
}

// bindingRepeat: a structured record in the test has two of one header.
func bindingRepeat(hs []kgo.RecordHeader) bool {
	for i, h := range hs {
		for _, h2 := range hs[i+1:] {
			if strings.EqualFold(h.Key, h2.Key) {
				return true
			}
		}
	}
	return false
}

// EncodeCommand (the client's Submit and Send, the CLI's submit) refuses
// data DecodeCommand would refuse for not being I-JSON or naming a key
// twice, saying why, instead of writing a command that can only be
// answered rejected invalid_command.
func TestEncodeCommandRefusesWhatDecodeRefuses(t *testing.T) {
	for _, data := range []string{`{"amount":1e400}`, `{"a":1,"a":2}`, `{"x":"\ud800"}`, "{\"x\":\"\xff\"}"} {
		for _, mode := range []Mode{Binary, Structured} {
			if _, err := EncodeCommand(Command{ID: "c1", Source: "s", Type: "t", Subject: "e1", Data: []byte(data)}, mode); err == nil {
				t.Errorf("%v %q: encoded", mode, data)
			}
		}
	}
	for _, data := range []string{`{"amount":1.5e308,"b":"\u00e9\ud83d\ude00"}`, `{"a":1}`} {
		r, err := EncodeCommand(Command{ID: "c1", Source: "s", Type: "t", Subject: "e1", Data: []byte(data)}, Structured)
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if _, err := DecodeCommand(r, 0); err != nil {
			t.Errorf("%s: encoded, then refused: %v", data, err)
		}
	}
}
