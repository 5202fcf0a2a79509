package audit

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// unchainedJournal is journal with each record's hash computed without the
// previous record's hash: a writer (or a forger) whose hashes cover each
// record alone, so records could be dropped, reordered or replaced without
// the chain noticing. linked says whether prev_hash still names the
// previous hash (the field right, the hash not covering it) or is empty.
func unchainedJournal(t *testing.T, p int32, linked bool, ents ...jent) []*kgo.Record {
	t.Helper()
	out := journal(t, p, ents...)
	prev := ""
	for _, r := range out {
		if string(headerOf(r, schemas.HeaderKind)) != schemas.KindRecord {
			continue
		}
		rc, err := schemas.UnmarshalRecord(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		rc.PrevHash = ""
		if _, err = wire.SealRecord(&rc); err != nil { // the previous hash ignored
			t.Fatal(err)
		}
		if linked {
			rc.PrevHash = prev
		}
		prev = rc.Hash
		r.Value = mustMarshal(t, rc)
	}
	return out
}

func headerOf(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// TestCheckChainIgnoringPrevHash: audit must refuse a journal whose hashes
// do not cover the previous record's hash, whether prev_hash names the
// previous hash (the hash does not verify) or is empty (the chain does not
// link). Only the first record, whose previous hash is "", is right.
func TestCheckChainIgnoringPrevHash(t *testing.T) {
	for _, linked := range []bool{true, false} {
		name := map[bool]string{true: "prev_hash set, hash without it", false: "prev_hash empty"}[linked]
		t.Run(name, func(t *testing.T) {
			in := base(t)
			in.Journal = unchainedJournal(t, pe, linked,
				marker(1),
				rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
				rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
				rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second),
				rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Second),
			)
			r := Check(in)
			c := find(r, CheckHashChain)
			if c.OK || len(c.Violations) == 0 {
				t.Fatalf("hash_chain ok on a chain whose hashes ignore prev_hash: %+v", c)
			}
			if v := c.Violations[0]; v.Offset != 2 || v.Partition != pe {
				t.Errorf("first violation %v, want partition %d offset 2 (the second record)", v, pe)
			}
			if r.OK() {
				t.Error("report OK")
			}
			// Every record after the first is flagged.
			if c.Count != 3 {
				t.Errorf("%d violations (%v), want the 3 records after the first", c.Count, c.Violations)
			}
		})
	}
	// The same records chained properly pass: the test above fails for
	// the hashes, not for the records.
	in := base(t)
	linkOutcomes(t, &in)
	if r := Check(in); !r.OK() {
		t.Fatalf("the properly chained base history fails: %+v", r.Checks)
	}
}
