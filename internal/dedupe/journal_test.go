package dedupe

import (
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// BindJournal: a new store is bound, the same journal keeps it, a store
// without a binding but with Progress (an older build's) is adopted, and
// another journal (name, or id where both are known) empties it — records,
// entities, Progress, the caches — and keeps it usable.
func TestBindJournal(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	id1, id2 := [16]byte{1}, [16]byte{2}
	fill := func() {
		t.Helper()
		r := rec("k1", "order-1", schemas.StatusSucceeded, 0)
		now := time.Now()
		r.FinishedAt = &now
		b := s.NewBatch()
		b.PutRecord(r)
		b.SetProgress(0, Progress{JournalOffset: 42, Epoch: 3})
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if _, ok := mustLookup(t, s, "k1"); !ok {
			t.Fatal("k1 not stored")
		}
		if _, ok, err := s.Entity("order-1"); err != nil || !ok {
			t.Fatalf("entity: %v %v", ok, err)
		}
	}
	bind := func(topic string, id [16]byte, wantEmptied bool) {
		t.Helper()
		emptied, err := s.BindJournal(topic, id)
		if err != nil || emptied != wantEmptied {
			t.Fatalf("BindJournal(%s, %x) = %v, %v; want emptied %v", topic, id[:1], emptied, err, wantEmptied)
		}
	}
	empty := func() {
		t.Helper()
		if _, ok := mustLookup(t, s, "k1"); ok {
			t.Fatal("k1 still found after the store was emptied")
		}
		if _, ok, err := s.Entity("order-1"); err != nil || ok {
			t.Fatalf("entity after emptying: %v %v", ok, err)
		}
		if p, err := s.Progress(0); err != nil || p != (Progress{}) {
			t.Fatalf("progress after emptying: %+v %v", p, err)
		}
	}

	// An older build's store: records and Progress, no binding.
	fill()
	bind("j", id1, false) // adopted
	bind("j", id1, false)
	if _, ok := mustLookup(t, s, "k1"); !ok {
		t.Fatal("adopting emptied the store")
	}
	bind("j", [16]byte{}, false) // no id from the brokers: trusted by name
	bind("j", id2, true)         // recreated under the same name
	empty()
	fill()
	bind("other", id2, true)
	empty()

	// Emptied, the store works and the binding is durable.
	fill()
	s.Close()
	s = openTest(t, dir)
	if _, ok := mustLookup(t, s, "k1"); !ok {
		t.Fatal("k1 lost by reopening")
	}
	bind("other", id2, false)
	st, err := s.Prune(t.Context(), time.Now().Add(time.Hour), time.Minute, 2*time.Minute)
	if err != nil || st.Forgotten != 1 {
		t.Fatalf("prune after emptying: %+v %v", st, err)
	}
}
