package dedupe

import (
	"fmt"
	"testing"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// TestPutNewRecordRefKeepsCallersRecord: a record put by reference is the
// caller's own until the batch ends (no copy of ~0.5 KB per new key),
// and what the batch commits is that record, index and entity included.
func TestPutNewRecordRefKeepsCallersRecord(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := make([]schemas.Record, 3)
	raws := make([][]byte, len(recs))
	b := s.NewBatchSize(len(recs))
	for i := range recs {
		recs[i] = rec(fmt.Sprintf("ref-%d", i), "e1", schemas.StatusSucceeded, 0)
		recs[i].EntityVersion = int64(i + 1)
		if raws[i], err = wire.MarshalRecord(recs[i]); err != nil {
			t.Fatal(err)
		}
		b.PutNewRecordRef(&recs[i], raws[i])
	}
	for i := range recs {
		p := b.records[scopeOf(&recs[i])]
		if p == nil || p.rec != &recs[i] {
			t.Fatalf("record %d: the batch holds a copy, not the caller's record", i)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		got, ok, err := s.Lookup("e1", recs[i].IdempotencyKey)
		if err != nil || !ok {
			t.Fatalf("lookup %d: found %v, %v", i, ok, err)
		}
		if got.Hash != recs[i].Hash || got.EntityVersion != recs[i].EntityVersion {
			t.Errorf("lookup %d: %+v, want the record put", i, got)
		}
	}
	es, ok, err := s.Entity("e1")
	if err != nil || !ok || es.Version != 3 || es.LastKey != "ref-2" {
		t.Errorf("entity: %+v %v %v, want version 3, last key ref-2", es, ok, err)
	}
}
