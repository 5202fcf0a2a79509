package schemas_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/jcs"
	"github.com/onceflight/onceflight/internal/wire"
	. "github.com/onceflight/onceflight/schemas"
)

// The golden files pin the exact bytes of every wire type this package
// writes and reads: a change to any of them is a change of the wire format,
// visible in review as a diff of testdata/golden. Each test encodes a fixed
// value and compares the bytes with its file, then decodes the file and
// compares the result with the value. `go test ./schemas -run WireGolden
// -update` rewrites the files from the encoders.
var update = flag.Bool("update", false, "rewrite testdata/golden from the encoders")

// golden compares got with testdata/golden/name (or writes it with -update)
// and returns the file's bytes.
func golden(t *testing.T, name string, got []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: encoded bytes differ from the golden file\n got: %s\nwant: %s", name, got, want)
	}
	return want
}

// meta is a Kafka record's key and headers as a golden file, one header a
// line, sorted by name: the value is in a file of its own, byte for byte.
// Header order is not pinned: sdk-go writes a binary event's extension
// headers in map order (it differs from run to run), and no reader of the
// CloudEvents Kafka binding depends on it.
type meta struct {
	Key     *string     `json:"key"`
	Headers [][2]string `json:"headers"`
}

func encodeMeta(t *testing.T, r *kgo.Record) []byte {
	t.Helper()
	str := func(s string) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	hs := slices.Clone(r.Headers)
	slices.SortStableFunc(hs, func(a, b kgo.RecordHeader) int { return strings.Compare(a.Key, b.Key) })
	var b strings.Builder
	b.WriteString("{\"key\": ")
	if r.Key == nil {
		b.WriteString("null")
	} else {
		b.WriteString(str(string(r.Key)))
	}
	b.WriteString(",\n \"headers\": [")
	for i, h := range hs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  [" + str(h.Key) + ", " + str(string(h.Value)) + "]")
	}
	b.WriteString("\n]}\n")
	return []byte(b.String())
}

// goldenRecord pins r as name.meta.json and name.value and returns the
// record read back from the files.
func goldenRecord(t *testing.T, name string, r *kgo.Record) *kgo.Record {
	t.Helper()
	mb := golden(t, name+".meta.json", encodeMeta(t, r))
	vb := golden(t, name+".value", r.Value)
	var m meta
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	out := &kgo.Record{Value: vb}
	if m.Key != nil {
		out.Key = []byte(*m.Key)
	}
	for _, h := range m.Headers {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
	}
	return out
}

// goldenCommand is a command with every optional attribute set.
func goldenCommand() Command {
	v := int64(3)
	d := time.Date(2025, 3, 1, 12, 5, 0, 0, time.UTC)
	return Command{
		ID: "cmd-7f3a", Source: "urn:shop:refunds-ui", Type: "payments.refund", Subject: "order-1042",
		IdempotencyKey: "refund-1042", ExpectedVersion: &v, Deadline: &d, TraceParent: ValidTP,
		Data: json.RawMessage(`{"amount":{"value":1999,"currency":"EUR"},"reason":"damaged <b>&</b>"}`),
	}
}

func TestWireGoldenCommand(t *testing.T) {
	for _, mode := range []Mode{Structured, Binary} {
		t.Run(mode.String(), func(t *testing.T) {
			c := goldenCommand()
			r, err := EncodeCommand(c, mode)
			if err != nil {
				t.Fatal(err)
			}
			back := goldenRecord(t, "command_"+mode.String(), r)
			got, err := DecodeCommand(back, DefaultMaxDataBytes)
			if err != nil {
				t.Fatal(err)
			}
			want := c
			want.Fingerprint = GoldenFingerprintHTML
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// A structured command as a producer in another language writes it:
// attributes in any order, whitespace, the data an object. The file is
// input only (no encoder of ours writes it); it pins what must decode, and
// to what.
func TestWireGoldenCommandFromProducer(t *testing.T) {
	b, err := os.ReadFile("testdata/golden/command_producer.value.json")
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Key: []byte("order-1042"), Value: b,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json; charset=UTF-8")}}}
	got, err := DecodeCommand(r, DefaultMaxDataBytes)
	if err != nil {
		t.Fatal(err)
	}
	want := goldenCommand()
	want.Data = json.RawMessage(`{"amount": {"value": 1999, "currency": "EUR"}, "reason": "damaged <b>&</b>"}`)
	want.Fingerprint = GoldenFingerprintHTML
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded\n got %+v\nwant %+v", got, want)
	}
	// The fingerprint is over canonical data: the encoder's compact form
	// of the same data has the same one.
	if fp, _ := Fingerprint(want.Type, want.Subject, goldenCommand().Data); fp != got.Fingerprint {
		t.Errorf("fingerprint of the producer's data %s, of the compact data %s", got.Fingerprint, fp)
	}
}

// GoldenFingerprintHTML is the fingerprint of goldenCommand (type, subject,
// canonical data): it must only change deliberately.
const GoldenFingerprintHTML = "sha256:95275a02301c50af0373b9044cb0d4dfa039b8056226cf688f73aa672ae4c40e"

// goldenRecords are journal records of several kinds: an intent, a final
// success, a rejection, and an operator's resolution followed by a release.
func goldenRecords() []Record {
	at := func(s int) *time.Time { t := time.Date(2025, 3, 1, 12, 0, s, 0, time.UTC); return &t }
	base := testRecord()
	base.Hash, base.PrevHash = "", ""
	intent := base
	intent.Status, intent.Result, intent.FinishedAt = StatusInProgress, nil, nil
	intent.FencingToken, intent.Deadline = 41, at(31)
	intent.UniqueKey = "sha256:9d8a1f"
	done := base
	done.FencingToken = 41
	done.UniqueKey = intent.UniqueKey
	rejected := Record{
		IdempotencyKey: "refund-1042", Entity: "order-1042", Action: "payments.refund", Status: StatusRejected,
		Fingerprint: "sha256:ffff", Error: &Error{Code: CodeKeyReused, Message: `key "refund-1042" was used with other data`},
		Command:   CommandRef{ID: "cmd-8000", Source: "urn:shop:refunds-ui", Partition: 2, Offset: 1240},
		StartedAt: at(5), FinishedAt: at(5), Executor: "onceflight-1", Epoch: 18,
	}
	resolved := base
	resolved.Status = StatusFailed
	resolved.Result = nil
	resolved.Error = &Error{Code: "confirmation_timeout", Message: "no answer — «unicode» \u2028 and \"quotes\""}
	resolved.Resolution = &Resolution{By: "ops@example.com", At: *at(40), Reason: "checked with the bank", As: StatusFailed}
	resolved.Release = &Resolution{By: "ops@example.com", At: *at(50), Reason: "retry with a new card", As: StatusFailed}
	return []Record{intent, done, rejected, resolved}
}

// TestGoldenJournal pins a chain of journal values (SealRecord, each
// prev_hash the previous hash) and checks every hash the way any RFC 8785
// library would: SHA-256 of the JCS form of the record without its hash.
func TestWireGoldenJournal(t *testing.T) {
	var all []byte
	var want []Record
	prev := ""
	for _, rec := range goldenRecords() {
		rec.PrevHash = prev
		b, err := wire.SealRecord(&rec)
		if err != nil {
			t.Fatal(err)
		}
		prev = rec.Hash
		want = append(want, rec)
		all = append(append(all, b...), '\n')
	}
	file := golden(t, "journal_records.jsonl", all)
	lines := bytes.Split(bytes.TrimSuffix(file, []byte("\n")), []byte("\n"))
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	prev = ""
	for i, line := range lines {
		got, err := UnmarshalRecord(line)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if !reflect.DeepEqual(canonicalRecord(t, got), canonicalRecord(t, want[i])) {
			t.Errorf("line %d decoded\n got %+v\nwant %+v", i, got, want[i])
		}
		// Canonical: JCS leaves it unchanged.
		if c, err := jcs.Canonical(line); err != nil || !bytes.Equal(c, line) {
			t.Errorf("line %d is not in RFC 8785 form (%v):\n%s\n%s", i, err, line, c)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		var h, ph string
		_ = json.Unmarshal(m["hash"], &h)
		_ = json.Unmarshal(m["prev_hash"], &ph)
		if ph != prev {
			t.Errorf("line %d: prev_hash %q, want the previous line's hash %q", i, ph, prev)
		}
		delete(m, "hash")
		nohash, _ := json.Marshal(m)
		canon, err := jcs.Canonical(nohash)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(canon)
		if want := "sha256:" + hex.EncodeToString(sum[:]); h != want {
			t.Errorf("line %d: hash %s, want sha256(jcs.Canonical(record without hash)) = %s", i, h, want)
		}
		if rh, err := wire.RecordHash(line); err != nil || rh != h {
			t.Errorf("line %d: RecordHash %s (%v), want %s", i, rh, err, h)
		}
		// MarshalRecord and the outcome's data are the same bytes.
		if b, _ := wire.MarshalRecord(got); !bytes.Equal(b, line) {
			t.Errorf("line %d: MarshalRecord differs from the sealed bytes", i)
		}
		prev = h
	}
}

func TestWireGoldenOutcome(t *testing.T) {
	for _, c := range []struct {
		name     string
		rec      Record
		replayed bool
	}{
		{"outcome_succeeded", testRecord(), false},
		{"outcome_rejected_replayed", goldenRecords()[2], true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := wire.EncodeOutcome(c.rec, "cmd-7f3a", c.replayed)
			if err != nil {
				t.Fatal(err)
			}
			back := goldenRecord(t, c.name, r)
			got, err := DecodeOutcome(back)
			if err != nil {
				t.Fatal(err)
			}
			want := Outcome{ID: OutcomeID(c.rec.IdempotencyKey, c.rec.Status, "cmd-7f3a"), Type: OutcomeTypePrefix + string(c.rec.Status),
				Source: OutcomeSource, Subject: c.rec.Entity, IdempotencyKey: c.rec.IdempotencyKey, CausationID: "cmd-7f3a",
				Replayed: c.replayed, Record: c.rec}
			got.Record, want.Record = canonicalRecord(t, got.Record), canonicalRecord(t, want.Record)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// canonicalRecord is rec as the journal carries it: result and data in
// RFC 8785 form, no result as JSON null.
func canonicalRecord(t *testing.T, rec Record) Record {
	t.Helper()
	if len(rec.Result) == 0 || string(rec.Result) == "null" {
		rec.Result = nil
	} else {
		c, err := jcs.Canonical(rec.Result)
		if err != nil {
			t.Fatal(err)
		}
		rec.Result = c
	}
	if len(rec.Data) == 0 {
		rec.Data = nil
	} else {
		c, err := jcs.Canonical(rec.Data)
		if err != nil {
			t.Fatal(err)
		}
		rec.Data = c
	}
	return rec
}

func TestWireGoldenEpochMarker(t *testing.T) {
	m := wire.EpochMarker{Epoch: 17, Executor: "onceflight-0", Partitions: 12}
	// As the outbox writes it: the marker value with kind and epoch headers.
	r := &kgo.Record{Key: nil, Value: wire.EncodeEpochMarker(m), Headers: []kgo.RecordHeader{
		{Key: HeaderKind, Value: []byte(KindEpoch)}, {Key: HeaderEpoch, Value: []byte("17")}}}
	back := goldenRecord(t, "epoch_marker", r)
	if k := wire.JournalKind(back); k != KindEpoch {
		t.Errorf("kind %q", k)
	}
	if got := wire.DecodeEpochMarker(back); got != m {
		t.Errorf("decoded %+v, want %+v", got, m)
	}
	// A marker whose value does not decode falls back to the header.
	back.Value = []byte("not json")
	if got := wire.DecodeEpochMarker(back); got != (wire.EpochMarker{Epoch: 17}) {
		t.Errorf("header-only marker decoded %+v", got)
	}
}

// goldenControlKeys is a fixed control key: secret 0x00..0x1f.
func goldenControlKeys() *ControlKeys {
	k := ControlKey{ID: "ops-1", Secret: make([]byte, 32), Created: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)}
	for i := range k.Secret {
		k.Secret[i] = byte(i)
	}
	return &ControlKeys{Keys: []ControlKey{k}}
}

func TestWireGoldenControlKeyFile(t *testing.T) {
	ks := goldenControlKeys()
	b := golden(t, "control_keys.json", ks.Encode())
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadControlKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ks) {
		t.Errorf("loaded %+v, want %+v", got, ks)
	}
}

// TestGoldenControlCommands pins signed decisions (a fixed key, so a fixed
// signature) as the client sends them (binary mode), and checks that the
// decoded command verifies and that changing what it acts on breaks the
// signature.
func TestWireGoldenControlCommands(t *testing.T) {
	ks := goldenControlKeys()
	for _, c := range []struct {
		typ string
		d   Decision
	}{
		{TypeApprove, Decision{Key: "refund-1042", Reason: "not a duplicate: a second parcel", By: "ops@example.com"}},
		{TypeRelease, Decision{Key: "refund-1042", Reason: "customer asked again", By: "ops@example.com"}},
		{TypeResolve, Decision{Key: "refund-1042", As: string(StatusSucceeded), Reason: "bank statement shows it", By: "ops@example.com"}},
	} {
		t.Run(c.typ, func(t *testing.T) {
			data, err := json.Marshal(c.d)
			if err != nil {
				t.Fatal(err)
			}
			cmd := Command{ID: "dec-" + c.typ, Source: "onceflight-cli", Type: c.typ, Subject: "order-1042",
				IdempotencyKey: c.typ + "/dec-" + c.typ, Data: data}
			if err := ks.SignControl(&cmd); err != nil {
				t.Fatal(err)
			}
			r, err := EncodeCommand(cmd, Binary)
			if err != nil {
				t.Fatal(err)
			}
			back := goldenRecord(t, "control_"+c.typ[len("onceflight."):], r)
			got, err := DecodeCommand(back, DefaultMaxDataBytes)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, cmd) {
				t.Errorf("decoded\n got %+v\nwant %+v", got, cmd)
			}
			if err := ks.VerifyControl(&got); err != nil {
				t.Errorf("verify: %v", err)
			}
			var d Decision
			if err := json.Unmarshal(got.Data, &d); err != nil || d != c.d {
				t.Errorf("decision %+v (%v), want %+v", d, err, c.d)
			}
			moved := got
			moved.IdempotencyKey += "x"
			if err := ks.VerifyControl(&moved); err == nil {
				t.Error("a decision moved to another key still verifies")
			}
		})
	}
}

func TestWireGoldenDeadletter(t *testing.T) {
	orig := &kgo.Record{Topic: "onceflight.commands", Partition: 2, Offset: 99, Key: []byte("order-7"),
		Value: []byte("not a cloudevent \x00\xff"), Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("text/plain")}}}
	r := wire.DeadletterRecord(orig, "value is not JSON")
	back := goldenRecord(t, "deadletter", r)
	if !bytes.Equal(back.Value, orig.Value) || string(back.Key) != "order-7" {
		t.Errorf("deadletter read back: %q %q", back.Key, back.Value)
	}
	ref := wire.DeadletterReference(orig, "too large", func(r *kgo.Record) bool { return r.Value == nil })
	goldenRecord(t, "deadletter_reference", ref)
}

// TestGoldenHeaderNames pins every header and CloudEvents extension name
// the package reads or writes.
func TestWireGoldenHeaderNames(t *testing.T) {
	names := map[string]string{
		"ExtIdempotencyKey": ExtIdempotencyKey, "ExtExpectedVersion": ExtExpectedVersion, "ExtDeadline": ExtDeadline,
		"ExtTraceParent": ExtTraceParent, "ExtControlKeyID": ExtControlKeyID, "ExtControlSig": ExtControlSig,
		"ExtCausationID": ExtCausationID, "ExtReplayed": ExtReplayed,
		"HeaderKind": HeaderKind, "KindRecord": KindRecord, "KindEpoch": KindEpoch, "HeaderEpoch": HeaderEpoch,
		"HeaderDeadletterReason": HeaderDeadletterReason, "HeaderSourceTopic": HeaderSourceTopic,
		"HeaderSourcePartition": HeaderSourcePartition, "HeaderSourceOffset": HeaderSourceOffset,
		"HeaderDeadletterOmitted": HeaderDeadletterOmitted, "HeaderDeadletterValueBytes": HeaderDeadletterValueBytes,
		"headerPrefix": HeaderPrefix, "headerContentType": HeaderContentType,
		"OutcomeSource": OutcomeSource, "OutcomeTypePrefix": OutcomeTypePrefix,
		"TypeResolve": TypeResolve, "TypeApprove": TypeApprove, "TypeRelease": TypeRelease, "TypeReconcile": TypeReconcile,
	}
	b, err := json.MarshalIndent(names, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	file := golden(t, "names.json", append(b, '\n'))
	var got map[string]string
	if err := json.Unmarshal(file, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, names) {
		t.Errorf("names file %v, constants %v", got, names)
	}
}

// TestWireGoldenEvidence pins the evidence members (docs/events.md#evidence):
// established_by, evidence and evidence_dropped, in RFC 8785 form, decoded
// back as written, hashed over.
func TestWireGoldenEvidence(t *testing.T) {
	rec := evidenceRecord()
	b, err := wire.SealRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	line := golden(t, "journal_record_evidence.json", b)
	got, err := UnmarshalRecord(line)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(canonicalRecord(t, got), canonicalRecord(t, rec)) {
		t.Errorf("decoded\n got %+v\nwant %+v", got, rec)
	}
	if c, err := jcs.Canonical(line); err != nil || !bytes.Equal(c, line) {
		t.Errorf("not in RFC 8785 form (%v):\n%s\n%s", err, line, c)
	}
	if h, err := wire.RecordHash(line); err != nil || h != rec.Hash {
		t.Errorf("RecordHash %s (%v), want %s", h, err, rec.Hash)
	}
}
