package schemas

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// goldenFingerprint pins the fingerprint scheme: changing it orphans every
// stored record's fingerprint, so this must only change deliberately.
const goldenFingerprint = "sha256:bff42430b3310c71252cba073eff2ee9173205f4b1ccf9b7b526c4cf02c2e8c5"

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func structuredHeaders() []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}
}

// binaryFile is testdata/command_binary.json: a binary-mode record.
type binaryFile struct {
	Key     string `json:"key"`
	Headers []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"headers"`
	Value string `json:"value"`
}

func loadBinary(t testing.TB) *kgo.Record {
	t.Helper()
	b, err := os.ReadFile("testdata/command_binary.json")
	if err != nil {
		t.Fatal(err)
	}
	var f binaryFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Key: []byte(f.Key), Value: []byte(f.Value)}
	for _, h := range f.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	return r
}

func loadStructured(t testing.TB) *kgo.Record {
	t.Helper()
	b, err := os.ReadFile("testdata/command_structured.json")
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Key: []byte("order-1042"), Value: b, Headers: structuredHeaders()}
}

// structuredAttrs is a minimal valid structured command as a map to mutate.
func structuredAttrs() map[string]any {
	return map[string]any{
		"specversion": "1.0", "id": "c1", "source": "src", "type": "t.do", "subject": "e1",
		"data": map[string]any{"a": 1},
	}
}

func structuredRecord(t testing.TB, key string, attrs map[string]any) *kgo.Record {
	t.Helper()
	b, err := json.Marshal(attrs)
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Value: b, Headers: structuredHeaders()}
	if key != "" {
		r.Key = []byte(key)
	}
	return r
}

// binaryRecord builds a binary-mode command from header pairs.
func binaryRecord(key, value string, kv ...string) *kgo.Record {
	r := &kgo.Record{Value: []byte(value)}
	if key != "" {
		r.Key = []byte(key)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return r
}

func binaryBase() []string {
	return []string{"ce_specversion", "1.0", "ce_id", "c1", "ce_source", "src", "ce_type", "t.do", "ce_subject", "e1", "content-type", "application/json"}
}

func asDecodeError(t testing.TB, err error) *DecodeError {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
	}
	if de.Reason == "" {
		t.Fatalf("empty Reason")
	}
	return de
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
