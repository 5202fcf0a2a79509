package audit

import (
	"strconv"
	"testing"
	"time"
)

// TestIDStoreDoesNotCompact: the store's tables are never compacted
// (digests spread every table over the whole key space, so compactions
// rewrote everything for nothing), and every id written across many
// flushed tables is still found with its first use.
func TestIDStoreDoesNotCompact(t *testing.T) {
	st, err := openIDStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.close(); err != nil {
			t.Error(err)
		}
	}()
	const tables, per = 8, 500
	for i := range tables {
		ids := map[digest]idSeen{}
		for j := range per {
			ids[digestOf(strconv.Itoa(i*per+j))] = idSeen{tuple: digestOf("t", strconv.Itoa(j)), at: src{int32(i), int64(j)}}
		}
		if err := st.add(ids); err != nil {
			t.Fatal(err)
		}
		// One L0 table per batch: twice the count that starts a
		// compaction by default.
		if err := st.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// A compaction would be scheduled right after the flushes.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n := st.db.Metrics().Compact.Count; n > 0 {
			t.Fatalf("the store compacted %d times", n)
		}
	}
	for i := range tables {
		for j := range per {
			got, ok, err := st.get(digestOf(strconv.Itoa(i*per + j)))
			if err != nil || !ok || got.at != (src{int32(i), int64(j)}) || got.tuple != digestOf("t", strconv.Itoa(j)) {
				t.Fatalf("id %d: %+v, %v, %v", i*per+j, got, ok, err)
			}
		}
	}
	if _, ok, err := st.get(digestOf("absent")); ok || err != nil {
		t.Fatalf("an id never added was found (%v)", err)
	}
}
