package consumer_test

import (
	"bytes"
	"testing"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A repeat re-emits the recorded result as it was recorded: its outcome's
// data is the record's stored bytes, not the record decoded and encoded
// again. The record here carries a field this build does not know (as one
// written by a newer version would, after a rollback): the repeat's
// outcome keeps it, and a stub (pruned, no hash) is still encoded.
func TestRepeatReplaysStoredBytes(t *testing.T) {
	h := onceflighttest.New(t)
	dir := t.TempDir()
	h.Start(dir)
	h.Submit("c1", "order-1", "k1", `{"amount":5}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	h.Stop()

	st, err := dedupe.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rec, raw, found, err := st.LookupBytes("order-1", "k1")
	if err != nil || !found {
		t.Fatalf("lookup k1: found=%v err=%v", found, err)
	}
	if rec.Hash == "" {
		t.Fatalf("k1's record is not sealed: %s", raw)
	}
	future := append(bytes.Clone(raw[:len(raw)-1]), `,"zz_future":"kept"}`...)
	b := st.NewBatch()
	b.PutRecordBytes(rec, future)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	h.Start(dir)
	h.Submit("c2", "order-1", "k1", `{"amount":5}`)
	h.Outcomes(2, seen, nil)
	h.Stop()
	if o := seen["c2"][0]; !o.Replayed || o.Record.Status != schemas.StatusSucceeded {
		t.Fatalf("c2 was not answered from k1's record: %+v", o)
	}
	var got []byte
	for _, p := range []int32{0, 1, 2} {
		for _, r := range h.ReadAll("onceflight.outcomes", p) {
			o, err := schemas.DecodeOutcome(r)
			if err == nil && o.CausationID == "c2" {
				got = r.Value
			}
		}
	}
	if got == nil {
		t.Fatal("c2's outcome event not found")
	}
	if !bytes.Contains(got, []byte(`"zz_future":"kept"`)) {
		t.Fatalf("c2's outcome is not the stored record as recorded:\n%s", got)
	}
	want := wire.EncodeOutcomeData(&rec, future, "c2", true)
	if !bytes.Equal(got, want.Value) {
		t.Fatalf("c2's outcome:\n got %s\nwant %s", got, want.Value)
	}
}
