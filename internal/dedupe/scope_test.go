package dedupe

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceflight/onceflight/schemas"
)

// TestKeyScopedToEntity: one key for two entities is two records, each
// with its own index entries; LookupKey lists both.
func TestKeyScopedToEntity(t *testing.T) {
	s := openTest(t, t.TempDir())
	a := rec("refund-1", "order-a", schemas.StatusSucceeded, 0)
	b := rec("refund-1", "order-b", schemas.StatusUnresolved, 1)
	// An entity that is a prefix of another, and one with the separator
	// byte in it, must not see the other's keys.
	c := rec("refund-1", "order-a\x00x", schemas.StatusFailed, 2)
	put(t, s, a, b, c)
	for _, want := range []schemas.Record{a, b, c} {
		got, ok, err := s.Lookup(want.Entity, want.IdempotencyKey)
		if err != nil || !ok || got.Status != want.Status {
			t.Fatalf("Lookup(%q, %q) = %s, %v, %v; want %s", want.Entity, want.IdempotencyKey, got.Status, ok, err, want.Status)
		}
	}
	if _, ok, _ := s.Lookup("order-c", "refund-1"); ok {
		t.Fatal("key found for an entity that never used it")
	}
	// A key that is a prefix of this one must not show up in its listing.
	put(t, s, rec("refund-10", "order-a", schemas.StatusSucceeded, 0))
	all, err := s.LookupKey("refund-1")
	if err != nil || len(all) != 3 {
		t.Fatalf("LookupKey = %d records, %v; want 3", len(all), err)
	}
	// In entity order, whole records read from r/ (not index stubs).
	for i, want := range []schemas.Record{a, c, b} {
		if all[i].Entity != want.Entity || all[i].Status != want.Status || all[i].Hash != want.Hash {
			t.Fatalf("LookupKey[%d] = %q %s, want %q %s", i, all[i].Entity, all[i].Status, want.Entity, want.Status)
		}
	}
	un, err := s.Unresolved([]int32{1}, 0)
	if err != nil || len(un) != 1 || un[0].Entity != "order-b" {
		t.Fatalf("Unresolved = %+v, %v", un, err)
	}
	checkIndexes(t, s)
}

// TestRecordsKeyFirst: records are stored under r/<key>\x00<entity'> and
// no per-key index (format 2's x/) is written: LookupKey reads the records
// by prefix, so a key costs one entry fewer for compactions to rewrite.
func TestRecordsKeyFirst(t *testing.T) {
	s := openTest(t, t.TempDir())
	put(t, s, rec("refund-1", "order\x00b", schemas.StatusSucceeded, 0))
	if got, want := allKeys(t, s, prefixRecord), []string{"r/refund-1\x00order\x01\x01b"}; !slices.Equal(got, want) {
		t.Fatalf("record keys %q, want %q", got, want)
	}
	if x := allKeys(t, s, "x/"); len(x) != 0 {
		t.Fatalf("x/ entries written: %q", x)
	}
}

// TestUniqueHolders: a record holds its unique_by tuple while in_progress,
// succeeded, unresolved or held and not released; the entry goes with the
// status.
func TestUniqueHolders(t *testing.T) {
	s := openTest(t, t.TempDir())
	r := rec("k1", "order-1", schemas.StatusInProgress, 0)
	r.UniqueKey = "sha256:t"
	put(t, s, r)
	holders := func() []string {
		t.Helper()
		h, err := s.UniqueHolders("order-1", r.Action, "sha256:t")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := holders(); len(h) != 1 || h[0] != "k1" {
		t.Fatalf("holders = %q, want [k1]", h)
	}
	if h, _ := s.UniqueHolders("order-2", r.Action, "sha256:t"); len(h) != 0 {
		t.Fatalf("other entity holds the tuple: %q", h)
	}
	r.Status = schemas.StatusFailed
	put(t, s, r)
	if h := holders(); len(h) != 0 {
		t.Fatalf("failed record still holds the tuple: %q", h)
	}
	r.Status = schemas.StatusSucceeded
	put(t, s, r)
	if h := holders(); len(h) != 1 {
		t.Fatalf("succeeded record does not hold the tuple: %q", h)
	}
	r.Release = &schemas.Resolution{By: "op", Reason: "redo", As: schemas.StatusSucceeded}
	put(t, s, r)
	if h := holders(); len(h) != 0 {
		t.Fatalf("released record still holds the tuple: %q", h)
	}
}

// TestOldLayoutEmptied: a store without the format marker is emptied on
// open, Progress included, so restore replays the journal from its start.
func TestOldLayoutEmptied(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: pebbleLogger{slog.New(slog.DiscardHandler), newFailure()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"r/refund-1", "s/succeeded/refund-1", "p/0000000000"} {
		if err := db.Set([]byte(k), []byte(`{"journal_offset":42}`), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, dir)
	p, err := s.Progress(0)
	if err != nil || p.JournalOffset != 0 {
		t.Fatalf("Progress after layout change = %+v, %v; want offset 0", p, err)
	}
	for _, k := range allKeys(t, s, "") {
		if k != keyFormat && k != keyPruneMeta {
			t.Fatalf("key %q of the old layout kept", k)
		}
	}
	put(t, s, rec("refund-1", "order-1", schemas.StatusSucceeded, 0))
	s.Close()
	s2 := openTest(t, dir)
	if _, ok, err := s2.Lookup("order-1", "refund-1"); err != nil || !ok {
		t.Fatalf("record written in the new layout lost on reopen: %v, %v", ok, err)
	}
}

// TestFormat2StoreRebuilt: a store written by format 2 (records
// entity-first, an x/ entry per key, s/succeeded/ entries, m/format 2) is
// emptied on open, Progress included, so restore replays the journal from
// its start; replayed, the records are found key-first, by key and by
// status, and no entry of the old layout is left.
func TestFormat2StoreRebuilt(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: pebbleLogger{slog.New(slog.DiscardHandler), newFailure()}})
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]string{
		"m/format":                         "2",
		"r/e-1\x00k-1":                     `{"idempotency_key":"k-1"}`,
		"s/succeeded/e-1\x00k-1":           "",
		"x/k-1\x00e-1":                     "",
		"e/e-1":                            `{"version":1}`,
		"p/" + partitionString(0):          `{"journal_offset":42}`,
		"f/0000000000000000001/e-1\x00k-1": "",
	}
	for k, v := range old {
		if err := db.Set([]byte(k), []byte(v), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, dir)
	if p, err := s.Progress(0); err != nil || p.JournalOffset != 0 {
		t.Fatalf("Progress of a format-2 store = %+v, %v; want offset 0 (replay from the start)", p, err)
	}
	if got := allKeys(t, s, ""); !slices.Equal(got, []string{keyFormat, keyPruneMeta}) {
		t.Fatalf("keys after opening a format-2 store: %q", got)
	}
	// The replay, as a restore writes it.
	journal := journalFixture(t)
	b := s.NewBatch()
	for _, raw := range journal {
		r, err := schemas.UnmarshalRecordIndex(raw)
		if err != nil {
			t.Fatal(err)
		}
		b.PutRecordBytes(r, raw)
	}
	b.SetProgress(0, Progress{JournalOffset: int64(len(journal))})
	if err := b.CommitIngest(); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.LookupKey("k-1"); err != nil || len(recs) != 1 || recs[0].Entity != "e-1" || recs[0].Status != schemas.StatusSucceeded {
		t.Fatalf("LookupKey(k-1) after the replay = %+v, %v", recs, err)
	}
	if x := allKeys(t, s, "x/"); len(x) != 0 {
		t.Fatalf("x/ entries after the replay: %d", len(x))
	}
	if r, ok := lookupScoped(t, s, "k-1\x00e-1"); !ok || r.IdempotencyKey != "k-1" {
		t.Fatalf("record k-1 not stored key-first: %+v, %v", r, ok)
	}
	checkIndexes(t, s)
}
