package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// recordSamples are journal values as the executor seals them, in the
// shapes a record takes: in progress, final with a result, an error,
// evidence, a resolution and a release, escapes and non-ASCII, nested data.
func recordSamples(t testing.TB) [][]byte {
	t.Helper()
	start, fin := t0, t0.Add(time.Second)
	recs := []schemas.Record{
		{IdempotencyKey: "k1", Entity: "order-1", Action: "noop.ping", Status: schemas.StatusInProgress, Attempts: 1,
			Command: schemas.CommandRef{ID: "c1", Partition: 2, Offset: 7, Source: "s"}, StartedAt: &start, Deadline: &fin,
			Epoch: 1, FencingToken: 1<<32 | 3, Data: json.RawMessage(`{"amount":1.50,"items":[1,2,{"z":null,"a":"é"}]}`)},
		{IdempotencyKey: "k1", Entity: "order-1", Status: schemas.StatusSucceeded, Attempts: 1, StartedAt: &start, FinishedAt: &fin,
			Result: json.RawMessage(`{"ok":true}`), PrevHash: "sha256:00", EstablishedBy: schemas.EstablishedByAnswer,
			Evidence: []schemas.Evidence{{Kind: schemas.EvidenceAttempt, Attempt: 1, At: fin, Answer: schemas.AnswerSucceeded, Detail: "200"}}},
		{IdempotencyKey: `quote"d\key`, Entity: "ключ", Status: schemas.StatusRejected,
			Error: &schemas.Error{Code: schemas.CodeUnknownAction, Message: "no <such> action\n"}, UniqueKey: "u"},
		{IdempotencyKey: "k4", Entity: "order-4", Status: schemas.StatusSucceeded, Command: schemas.CommandRef{ID: "c4"},
			Resolution: &schemas.Resolution{By: "ann", At: t0, As: schemas.StatusSucceeded, DecisionID: "d1"},
			Release:    &schemas.Resolution{By: "bob", At: fin, Reason: "again"}, EstablishedBy: schemas.EstablishedByOperator},
	}
	var out [][]byte
	for _, rc := range recs {
		b, err := wire.SealRecord(&rc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestSealedHash: the executor's records are hashed by sealing them
// again (no canonicalization of their bytes), to RecordHash's value; a
// record in another member order, with whitespace, or with its hash
// changed is not, and recordHash gives RecordHash's answer for it.
func TestSealedHash(t *testing.T) {
	for i, raw := range recordSamples(t) {
		rec, err := schemas.UnmarshalRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		want, err := wire.RecordHash(raw)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := sealedHash(&rec, raw)
		if !ok || h != want {
			t.Fatalf("sample %d: sealedHash = %q, %v; want %q, true:\n%s", i, h, ok, want, raw)
		}
		changed := map[string][]byte{
			"whitespace":   append([]byte(" "), raw...),
			"member order": reorder(t, raw),
			"hash changed": bytes.Replace(raw, []byte(`"hash":"sha256:`), []byte(`"hash":"sha256:0`), 1),
			"unknown":      bytes.Replace(raw, []byte(`{"action"`), []byte(`{"aaa":1,"action"`), 1),
		}
		for what, b := range changed {
			rec, err := schemas.UnmarshalRecord(b)
			if err != nil {
				t.Fatalf("sample %d, %s: %v", i, what, err)
			}
			if _, ok := sealedHash(&rec, b); ok {
				t.Fatalf("sample %d, %s: sealedHash accepted bytes the sealer does not write:\n%s", i, what, b)
			}
			checkRecordHash(t, b)
		}
	}
}

// reorder moves raw's first member to the end.
func reorder(t *testing.T, raw []byte) []byte {
	t.Helper()
	first, rest, ok := strings.Cut(string(raw[1:]), `,"attempts"`)
	if !ok {
		t.Fatalf("no attempts member in %s", raw)
	}
	return []byte(`{"attempts"` + strings.TrimSuffix(rest, "}") + "," + first + "}")
}

// checkRecordHash fails unless recordHash gives exactly what RecordHash
// gives for raw (value or error).
func checkRecordHash(t *testing.T, raw []byte) {
	t.Helper()
	rec, err := schemas.UnmarshalRecord(raw)
	if err != nil {
		return
	}
	want, wantErr := wire.RecordHash(raw)
	got, gotErr := recordHash(&rec, raw)
	if got != want || (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("recordHash = %q, %v; RecordHash = %q, %v\nfor %s", got, gotErr, want, wantErr, raw)
	}
}

// FuzzRecordHash: whatever the bytes, recordHash is RecordHash.
func FuzzRecordHash(f *testing.F) {
	for _, raw := range recordSamples(f) {
		f.Add(raw)
	}
	// Nested as deep as SealRecord takes data, one level deeper than
	// RecordHash takes a record.
	deep := schemas.Record{IdempotencyKey: "k", Status: schemas.StatusSucceeded,
		Data: json.RawMessage(`{"d":` + strings.Repeat(`[`, 512) + strings.Repeat(`]`, 512) + `}`)}
	raw, err := wire.SealRecord(&deep)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Fuzz(func(t *testing.T, raw []byte) { checkRecordHash(t, raw) })
}
