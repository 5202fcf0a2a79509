package consumer_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// TestCrashAfterIntentIsInherited: intents stay out of Pebble until a
// later record of their key replaces them (DESIGN.md, "An intent stays
// out of Pebble until its record is replaced"). An execution is stopped
// after its intents committed and before its final record (its
// confirmation hangs; the stop abandons it, as a crash would), while
// later commands of its partition finished, so the store holds records
// past its stored Progress. Then:
//
//   - while it runs, the intent is not in Pebble, yet the executor's
//     reads see it, and the partition's stored Progress is not past it;
//   - after the restart on the same data dir, the key is inherited
//     (deadline, then confirmation), never executed again: one POST. It
//     fails if the Progress were stored past the open intent: the restart
//     would find no record of the key and execute it again;
//   - the index of that store, replayed over records it held already,
//     equals the index of a restore from an empty data dir.
//
// Also with a signed journal required: the held Progress carries the seal
// before the intent's transaction, and the restore's seal gate goes on
// from it.
func TestCrashAfterIntentIsInherited(t *testing.T) {
	for _, signed := range []bool{false, true} {
		t.Run(fmt.Sprintf("signed=%v", signed), func(t *testing.T) {
			t.Parallel() // waits out a deadline, mostly idle
			h := onceflighttest.New(t)
			if signed {
				k := newExecKey(t, "executor-a")
				h.Opts = signing(k, trustedKeys(t, k.line))
			}
			crashAfterIntent(t, h, signed)
		})
	}
}

func crashAfterIntent(t *testing.T, h *onceflighttest.Harness, signed bool) {
	svc := newEvidenceService(t)
	h.UseConfig(strings.Replace(fmt.Sprintf(evidenceYAML, svc.URL("")), "confirm_timeout: 5s", "confirm_timeout: 60s", 1))
	dir := t.TempDir()
	h.Start(dir)
	const ent, key = "order-c", "crash-1"
	p := partitioner.ForEntity(ent, onceflighttest.Partitions)
	others, _ := entitiesOn(p, 4) // order-N: never ent
	h.SubmitAction("c-crash", "payments.refund", ent, key, `{"amount":1}`)
	intentAt := int64(-1)
	onceflighttest.WaitFor(t, 30*time.Second, "the confirmation_pending intent", func() bool {
		for _, r := range h.Journal(p) {
			if wire.JournalKind(r) != schemas.KindRecord {
				continue
			}
			rec, err := schemas.UnmarshalRecord(r.Value)
			if err == nil && rec.IdempotencyKey == key && rec.Error != nil && rec.Error.Code == schemas.CodeConfirmationPending {
				intentAt = r.Offset
			}
		}
		return intentAt >= 0
	})
	// Later commands of the partition finish: their records reach Pebble.
	seen := map[string][]schemas.Outcome{}
	for i, o := range others {
		h.SubmitAction(fmt.Sprintf("c-fast-%d", i), "payments.refund", o, fmt.Sprintf("fast-%d", i), `{"amount":2}`)
	}
	h.Outcomes(len(others), seen, nil)
	store := storeof.Executor(h.Ex)
	onceflighttest.WaitFor(t, 10*time.Second, "the fast records in Pebble", func() bool {
		for i, o := range others {
			if _, ok, _ := store.Lookup(o, fmt.Sprintf("fast-%d", i)); !ok {
				return false
			}
		}
		return true
	})
	if rec, ok, err := store.Lookup(ent, key); err != nil || ok {
		t.Fatalf("Pebble holds %s of %s (err %v) while its final record is not written: intents stay out of Pebble", rec.Status, key, err)
	}
	if rec, ok, err := h.Ex.Seen(ent, key); err != nil || !ok || rec.Status != schemas.StatusInProgress || rec.Error == nil || rec.Error.Code != schemas.CodeConfirmationPending {
		t.Fatalf("the executor reads %+v (found %v, err %v) of %s, want its confirmation_pending intent", rec, ok, err, key)
	}
	if prog, err := store.Progress(p); err != nil || prog.JournalOffset > intentAt || signed && prog.SealNote == "" {
		t.Fatalf("stored Progress of partition %d: %+v (err %v): past the open intent at offset %d, or without the seal before it", p, prog, err, intentAt)
	}
	h.Stop()

	close(svc.release)
	h.Start(dir)
	// The fast commands, consumed again, are answered again first.
	for n := len(others) + 1; len(seen["c-crash"]) == 0; n++ {
		h.Outcomes(n, seen, nil)
	}
	wantEvidence(t, seen["c-crash"][0].Record, schemas.StatusSucceeded, schemas.EstablishedByConfirmation,
		[]string{"attempt 1 ambiguous", "confirm executor found"})
	if n := svc.postsOf(key); n != 1 {
		t.Fatalf("%s: %d POSTs, want 1: executed again after the restart", key, n)
	}
	h.Stop()

	// The same journal restored from nothing.
	empty := t.TempDir()
	h.Start(empty)
	onceflighttest.WaitFor(t, 30*time.Second, "the restore from an empty data dir", h.Ex.Ready)
	h.Stop()
	want, got := indexView(t, empty, h.JournalAll()), indexView(t, dir, h.JournalAll())
	if d := diffLines(want, got); d != "" {
		t.Errorf("index replayed over a store ahead of its Progress differs from one restored from nothing (-scratch +ahead):\n%s", d)
	}
	h.Audit()
}

// indexView lists, one per line, what the store in dir answers about
// every key and entity of recs: the record by (entity, key) and by key,
// each entity's state, the records of each status, the unresolved and
// the unique_by holders — the index as readers see it.
func indexView(t *testing.T, dir string, recs []schemas.Record) []string {
	t.Helper()
	s, err := dedupe.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []string
	line := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	show := func(r schemas.Record) string {
		return fmt.Sprintf("%s/%s %s a%d tok%d %s", r.Entity, r.IdempotencyKey, r.Status, r.Attempts, r.FencingToken, r.Hash)
	}
	done := map[string]bool{}
	for _, r := range recs {
		if done[r.Entity+"\x00"+r.IdempotencyKey] {
			continue
		}
		done[r.Entity+"\x00"+r.IdempotencyKey] = true
		rec, ok, err := s.Lookup(r.Entity, r.IdempotencyKey)
		line("lookup %s/%s: %v %v %s", r.Entity, r.IdempotencyKey, ok, err, show(rec))
		byKey, err := s.LookupKey(r.IdempotencyKey)
		for _, b := range byKey {
			line("by key %s: %s %v", r.IdempotencyKey, show(b), err)
		}
		es, ok, err := s.Entity(r.Entity)
		line("entity %s: %v %v %+v", r.Entity, ok, err, es)
		if r.UniqueKey != "" {
			hs, err := s.UniqueHolders(r.Entity, r.Action, r.UniqueKey)
			slices.Sort(hs)
			line("unique %s/%s/%s: %v %v", r.Entity, r.Action, r.UniqueKey, hs, err)
		}
	}
	for _, st := range []schemas.Status{schemas.StatusInProgress, schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusUnresolved, schemas.StatusRejected, schemas.StatusHeld} {
		l, err := s.ByStatus(st, 100000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l {
			line("status %s: %s", st, show(r))
		}
	}
	un, err := s.Unresolved([]int32{0, 1, 2}, 100000)
	for _, r := range un {
		line("unresolved: %s %v", show(r), err)
	}
	slices.Sort(out)
	return out
}

// diffLines is the lines only in want (-) and only in got (+).
func diffLines(want, got []string) string {
	var b strings.Builder
	for _, w := range want {
		if !slices.Contains(got, w) {
			b.WriteString("- " + w + "\n")
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			b.WriteString("+ " + g + "\n")
		}
	}
	return b.String()
}
