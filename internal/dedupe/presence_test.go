package dedupe

import (
	"fmt"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// TestPresenceEveryWritePathFindsItsKey: a key written through each way a
// batch reaches Pebble is found by the next Lookup. Lookup answers
// "absent" for a key the presence filter has not seen, so a path that
// writes records without adding their keys fails here (and the mutant
// presence-add, which drops the add, is caught by it).
func TestPresenceEveryWritePathFindsItsKey(t *testing.T) {
	s := openTest(t, t.TempDir())
	waitPresence(t, s)
	paths := map[string]func(b *Batch) error{
		"Commit":       (*Batch).Commit,
		"CommitNoSync": (*Batch).CommitNoSync,
		"CommitIngest": (*Batch).CommitIngest,
		"CommitSyncLater": func(b *Batch) error {
			wait, err := b.CommitSyncLater()
			if err != nil {
				return err
			}
			return wait()
		},
	}
	for name, commit := range paths {
		for _, r := range []schemas.Record{
			rec("k-"+name, "e-"+name, schemas.StatusInProgress, 1),
			rec("k-"+name, "e-"+name, schemas.StatusSucceeded, 1), // again: an overwrite
			rec("k-new-"+name, "e-"+name, schemas.StatusUnresolved, 1),
		} {
			if _, ok, err := s.Lookup(r.Entity, r.IdempotencyKey); err != nil {
				t.Fatal(err)
			} else if ok != (r.Status == schemas.StatusSucceeded) {
				t.Fatalf("%s: %s found=%v before it was written (first write) or not after", name, r.IdempotencyKey, ok)
			}
			b := s.NewBatch()
			b.PutRecord(r)
			if err := commit(b); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got, ok, err := s.Lookup(r.Entity, r.IdempotencyKey)
			if err != nil || !ok || got.Status != r.Status {
				t.Fatalf("%s: lookup of %s after its write: %v %v %v", name, r.IdempotencyKey, got.Status, ok, err)
			}
		}
	}
}

// TestPresenceReopenFindsStoredKeys: a store reopened with records in it
// answers their keys as present, in the tables and in the WAL alike: the
// filter starts empty at every Open and only the scan of r/ there
// (loadPresence) puts the stored keys back. Without the scan every repeat
// after a restart would be taken for new work (G2): the mutant
// presence-scan is caught by this test.
func TestPresenceReopenFindsStoredKeys(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := 0; i < n; i += 500 {
		b := s.NewBatch()
		for j := i; j < i+500; j++ {
			b.PutRecord(rec(fmt.Sprintf("k-%d", j), fmt.Sprintf("e-%d", j%7), schemas.StatusSucceeded, 2))
		}
		if i == 0 {
			err = b.CommitIngest() // a table
		} else {
			err = b.Commit() // the WAL and memtable
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	waitPresence(t, s)
	for j := range n {
		if _, ok, err := s.Lookup(fmt.Sprintf("e-%d", j%7), fmt.Sprintf("k-%d", j)); err != nil || !ok {
			t.Fatalf("k-%d after reopening: found=%v err=%v", j, ok, err)
		}
	}
	if _, ok, err := s.Lookup("e-1", "k-never"); err != nil || ok {
		t.Fatalf("k-never: found=%v err=%v", ok, err)
	}
}

// waitPresence waits for s's presence filter scan to end and checks that
// it is trusted: only then do lookups answer from it.
func waitPresence(t testing.TB, s *Store) {
	t.Helper()
	<-s.present.done
	if !s.present.ready.Load() {
		t.Fatalf("presence filter scan ended without being ready (store: %v)", s.Failed())
	}
}

// TestPresenceSeeksUntilScanEnds: until the scan of the keys stored at
// Open has ended, the filter answers nothing (a stored key it has not
// reached yet would read as absent: G2), so lookups seek; a write made
// meanwhile is found, before and after the scan ends; and Close does not
// wait for a long scan to finish, only for it to stop.
func TestPresenceSeeksUntilScanEnds(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	b := s.NewBatch()
	for j := range 3000 {
		b.PutRecord(rec(fmt.Sprintf("k-%d", j), "e", schemas.StatusSucceeded, 2))
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	s, err := Open(dir, func(c *Settings) { c.presenceHold = hold })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for j := range 3000 {
		if _, ok, err := s.Lookup("e", fmt.Sprintf("k-%d", j)); err != nil || !ok {
			t.Fatalf("k-%d while the scan is held: found=%v err=%v", j, ok, err)
		}
	}
	if s.PresenceReady() {
		t.Fatal("filter ready before its scan ran")
	}
	b = s.NewBatch()
	b.PutRecord(rec("k-during", "e", schemas.StatusSucceeded, 2))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	close(hold)
	waitPresence(t, s)
	if !s.PresenceReady() {
		t.Fatal("PresenceReady false after the scan ended ready")
	}
	for _, k := range []string{"k-0", "k-2999", "k-during"} {
		if _, ok, err := s.Lookup("e", k); err != nil || !ok {
			t.Fatalf("%s after the scan: found=%v err=%v", k, ok, err)
		}
	}
	if _, ok, err := s.Lookup("e", "k-never"); err != nil || ok {
		t.Fatalf("k-never: found=%v err=%v", ok, err)
	}
}

// TestPresencePastTheCap: a filter at its memory cap keeps answering every
// written key as present (only its false positives rise), and never
// allocates past the cap.
func TestPresencePastTheCap(t *testing.T) {
	const capBytes = 4 << 10 // ~3 000 keys at presenceBitsPerKey
	s, err := Open(t.TempDir(), func(c *Settings) { c.presenceBytes = capBytes })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	waitPresence(t, s)
	const n = 20_000
	for i := 0; i < n; i += 1000 {
		b := s.NewBatch()
		for j := i; j < i+1000; j++ {
			b.PutRecord(rec(fmt.Sprintf("k-%d", j), "e", schemas.StatusFailed, 2))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for j := range n {
		if _, ok, err := s.Lookup("e", fmt.Sprintf("k-%d", j)); err != nil || !ok {
			t.Fatalf("k-%d: found=%v err=%v", j, ok, err)
		}
	}
	if got := s.present.sizeBytes(); got > capBytes {
		t.Fatalf("filter of %d bytes, cap %d", got, capBytes)
	}
}

// TestPresenceGenerations: the filter grows by generations without a
// false negative, at about the stated false-positive rate: each full
// generation ~1 %, so a few percent over three of them.
func TestPresenceGenerations(t *testing.T) {
	p := newPresence(presenceMaxBytes)
	const n = 3*presenceFirstKeys + 1000 // three generations and a bit
	for i := range n {
		p.add(fmt.Sprintf("k-%d\x00e", i))
	}
	if g := len(*p.gens.Load()); g != 3 {
		t.Fatalf("%d generations for %d keys, want 3 (1, 2, 4 M)", g, n)
	}
	for i := range n {
		if !p.mayContain([]byte(fmt.Sprintf("k-%d\x00e", i))) {
			t.Fatalf("k-%d: a false negative", i)
		}
	}
	fp := 0
	const tries = 100_000
	for i := range tries {
		if p.mayContain(fmt.Appendf(nil, "other-%d\x00e", i)) {
			fp++
		}
	}
	// Expected ~2 % (the newest generation is not full); 5 % is far
	// beyond any chance deviation at 100 000 tries.
	if fp > tries*5/100 {
		t.Fatalf("%d false positives in %d (%.2f %%)", fp, tries, 100*float64(fp)/tries)
	}
}
