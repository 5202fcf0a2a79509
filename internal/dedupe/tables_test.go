package dedupe

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// A batch's table entries are reused by the next batch once it is
// committed (tables): every batch's records, index entries and entity
// states must read back as written after many batches of different sizes
// went through the same tables, and a recycled table holds nothing of the
// batch before.
func TestReusedTablesKeepCommitted(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	raws := map[string][]byte{}
	for n := range 40 {
		b := s.NewBatchSize(n%7 + 1)
		for i := range n%7 + 1 {
			key := fmt.Sprintf("k-%d-%d", n, i)
			r := rec(key, fmt.Sprintf("e%d", i), schemas.StatusSucceeded, 0)
			r.Data = []byte(fmt.Sprintf(`{"n":%d,"pad":"%0*d"}`, n, n*7+i, 0))
			raw, err := wire.SealRecord(&r)
			if err != nil {
				t.Fatal(err)
			}
			raws[key] = raw
			b.PutNewRecordBytes(r, raw)
		}
		b.SetProgress(int32(n%3), Progress{JournalOffset: int64(n)})
		if n%2 == 0 {
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		} else {
			wait, err := b.CommitSyncLater()
			if err != nil {
				t.Fatal(err)
			}
			if err := wait(); err != nil {
				t.Fatal(err)
			}
		}
		b.Close()
	}
	for key, want := range raws {
		var n, i int
		if _, err := fmt.Sscanf(key, "k-%d-%d", &n, &i); err != nil {
			t.Fatal(err)
		}
		_, got, ok, err := s.LookupBytes(fmt.Sprintf("e%d", i), key)
		if err != nil || !ok || !bytes.Equal(got, want) {
			t.Fatalf("%s: found %v, %v:\n got %s\nwant %s", key, ok, err, got, want)
		}
	}
	if v := tables.Get(); v != nil {
		tab := v.(*tableEntries)
		if len(tab.e)+len(tab.refs)+len(tab.order) != 0 {
			t.Fatalf("a recycled table holds %d entries", len(tab.e))
		}
		for _, e := range tab.e[:cap(tab.e)] {
			if e.key != nil || e.value != nil {
				t.Fatalf("a recycled table still points to a batch's key %q", e.key)
			}
		}
	}
}
