package consumer_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// New keys' outcome events are written into buffers the committer reuses
// once their transaction is applied (consumer/eventbufs.go), and every
// buffer given back is poisoned in tests (TestMain). A buffer given back
// while the producer, Pebble's batch or a later transaction could still
// read it would show here: every outcome's data, every journal record and
// every stored record must be the record sealed, byte for byte the same
// in all three, after hundreds of buffers were reused across transactions.
func TestOutcomeBytesIntactAfterReuse(t *testing.T) {
	const entities, perEntity = 40, 8
	h := onceflighttest.New(t)
	dir := t.TempDir()
	h.Start(dir) // creates the topics
	h.Submit("c-first", "ent-0", "key-first", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	h.Stop()
	for k := range perEntity { // queued before the start: a drain, many commands per transaction
		for e := range entities {
			i := k*entities + e
			h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("ent-%d", e), fmt.Sprintf("key-%d", i), fmt.Sprintf(`{"n":%d,"pad":"%0*d"}`, i, i%300, 0))
		}
	}
	before := consumer.EventBufsPoisoned()
	h.Start(dir)
	h.Outcomes(1+entities*perEntity, seen, nil)
	h.Stop()
	if n := consumer.EventBufsPoisoned() - before; n < entities*perEntity {
		t.Fatalf("%d event buffers given back for %d new keys: reuse not exercised", n, entities*perEntity)
	}

	outcomeData := map[string][]byte{} // by key
	for p := range int32(onceflighttest.Partitions) {
		for _, r := range h.ReadAll("onceflight.outcomes", p) {
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				t.Fatalf("outcome at %d/%d: %v\n%q", p, r.Offset, err, r.Value)
			}
			if string(r.Key) != o.Record.Entity {
				t.Fatalf("outcome of %s: key %q", o.Record.IdempotencyKey, r.Key)
			}
			i := bytes.Index(r.Value, []byte(`,"data":`))
			if i < 0 || r.Value[len(r.Value)-1] != '}' {
				t.Fatalf("outcome of %s: no data member: %q", o.Record.IdempotencyKey, r.Value)
			}
			data := r.Value[i+len(`,"data":`) : len(r.Value)-1]
			checkSealed(t, "outcome data", data, o.Record.Hash)
			outcomeData[o.Record.IdempotencyKey] = data
		}
	}
	if len(outcomeData) != 1+entities*perEntity {
		t.Fatalf("%d outcomes' keys, want %d", len(outcomeData), 1+entities*perEntity)
	}
	journaled := map[string][]byte{}
	for p := range int32(onceflighttest.Partitions) {
		for _, r := range h.Journal(p) {
			if !isRecordKind(r.Headers) {
				continue
			}
			rec, err := schemas.UnmarshalRecord(r.Value)
			if err != nil {
				t.Fatalf("journal %d/%d: %v\n%q", p, r.Offset, err, r.Value)
			}
			checkSealed(t, "journal record", r.Value, rec.Hash)
			if string(r.Key) != rec.IdempotencyKey {
				t.Fatalf("journal record of %s: key %q", rec.IdempotencyKey, r.Key)
			}
			journaled[rec.IdempotencyKey] = r.Value
		}
	}
	st, err := dedupe.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	for i := range entities * perEntity {
		key := fmt.Sprintf("key-%d", i)
		j, ok := journaled[key]
		if !ok {
			t.Fatalf("%s: no journal record", key)
		}
		if !bytes.Equal(outcomeData[key], j) {
			t.Fatalf("%s: outcome data and journal record differ:\n%s\n%s", key, outcomeData[key], j)
		}
		_, raw, found, err := st.LookupBytes(fmt.Sprintf("ent-%d", i%entities), key)
		if err != nil || !found {
			t.Fatalf("%s: stored: found=%v err=%v", key, found, err)
		}
		if !bytes.Equal(raw, j) {
			t.Fatalf("%s: stored record and journal record differ:\n%s\n%s", key, raw, j)
		}
	}
}

// checkSealed fails unless raw is a record whose hash is hash.
func checkSealed(t *testing.T, what string, raw []byte, hash string) {
	t.Helper()
	got, err := wire.RecordHash(raw)
	if err != nil || got != hash || hash == "" {
		t.Fatalf("%s: hash %q, computed %q (%v):\n%q", what, hash, got, err, raw)
	}
}

func isRecordKind(hs []kgo.RecordHeader) bool {
	for _, h := range hs {
		if h.Key == schemas.HeaderKind {
			return string(h.Value) == schemas.KindRecord
		}
	}
	return false
}
