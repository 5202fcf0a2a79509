package dedupe

import (
	"bytes"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// wantIndexKeys is the index of rec as the store wrote it before its keys
// were built in an arena (round 12): each key a string of its parts.
func wantIndexKeys(rec *schemas.Record) []string {
	sc := scope(rec.Entity, rec.IdempotencyKey)
	var keys []string
	if statusIndexed(rec.Status) {
		keys = append(keys, "s/"+string(rec.Status)+"/"+sc)
	}
	if rec.Status == schemas.StatusUnresolved {
		keys = append(keys, "u/"+partitionString(rec.Command.Partition)+"/"+sc)
	}
	if HoldsUnique(rec) {
		keys = append(keys, uniquePrefix(rec.Entity, rec.Action, rec.UniqueKey)+rec.IdempotencyKey)
	}
	if prunable(rec) {
		keys = append(keys, "f/"+pruneTS(*rec.FinishedAt)+"/"+sc)
	}
	return keys
}

// TestBatchKeysUnchanged: records of every index shape, written new and
// then overwritten (status moved, unique tuple released, partition
// changed), leave in Pebble exactly the record and index keys the
// string-built index names for their last state, and nothing of the
// earlier ones.
func TestBatchKeysUnchanged(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 123, time.UTC)
	shapes := []func(r *schemas.Record){
		func(r *schemas.Record) { r.Status = schemas.StatusInProgress },
		func(r *schemas.Record) { r.Status = schemas.StatusSucceeded; r.FinishedAt = &t0 },
		func(r *schemas.Record) { r.Status = schemas.StatusUnresolved; r.UniqueKey = "u-1" },
		func(r *schemas.Record) { r.Status = schemas.StatusHeld; r.UniqueKey = "u-2" },
		func(r *schemas.Record) {
			r.Status = schemas.StatusFailed
			r.FinishedAt = &t0
			r.UniqueKey = "u-3"
			r.Release = &schemas.Resolution{By: "ops", At: t0, As: schemas.StatusFailed}
		},
		func(r *schemas.Record) { r.Status = schemas.StatusRejected; r.FinishedAt = &t0 },
		func(r *schemas.Record) { r.Status = schemas.StatusSucceeded; r.UniqueKey = "u-4"; r.FinishedAt = &t0 },
	}
	last := map[string]schemas.Record{}
	for round := range 3 {
		b := s.NewBatch()
		for i := range 300 {
			// Entities with the bytes escapeName rewrites, keys long
			// enough to spill the arena's buffers.
			r := rec(fmt.Sprintf("k-%d-%s", i, strings.Repeat("x", i%40)), fmt.Sprintf("e\x00%d\x01", i%17), "", int32((i+round)%5))
			shapes[(i+round)%len(shapes)](&r)
			if round == 0 {
				b.PutNewRecordBytes(r, nil)
			} else {
				b.PutRecord(r)
			}
			last[scopeOf(&r)] = r
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{}
	for sc, r := range last {
		want["r/"+sc] = true
		for _, k := range wantIndexKeys(&r) {
			want[k] = true
		}
	}
	var got, wantKeys []string
	for k := range dump(t, s) {
		switch k[:min(len(k), 2)] {
		case "r/", "s/", "u/", "b/", "f/", "k/":
			got = append(got, k)
		}
	}
	for k := range want {
		wantKeys = append(wantKeys, k)
	}
	sort.Strings(got)
	sort.Strings(wantKeys)
	if !reflect.DeepEqual(got, wantKeys) {
		t.Fatalf("stored keys differ from the string-built index: %d stored, %d wanted; %v", len(got), len(wantKeys), diff(got, wantKeys))
	}
}

// TestKeyArenaKeepsKeys: keys built in an arena stay as built while more
// are built after them, whether they fit its buffer or not.
func TestKeyArenaKeepsKeys(t *testing.T) {
	a := keyArena{chunk: 64}
	var keys [][]byte
	var want []string
	for i := range 200 {
		w, x := fmt.Sprintf("p%d/", i%7), strings.Repeat("k", i%90)
		keys = append(keys, a.join(w, x, "/", "z"))
		want = append(want, w+x+"/z")
	}
	for i := range keys {
		if string(keys[i]) != want[i] || cap(keys[i]) != len(keys[i]) {
			t.Fatalf("key %d: %q (cap %d), want %q", i, keys[i], cap(keys[i]), want[i])
		}
	}
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	r := rec("k", "e", schemas.StatusSucceeded, 0)
	r.FinishedAt = &t0
	if got := a.pruneKey(prefixPruneStub, &r, scopeOf(&r)); !bytes.Equal(got, []byte(pruneIndexKey(prefixPruneStub, &r))) {
		t.Fatalf("prune key %q, want %q", got, pruneIndexKey(prefixPruneStub, &r))
	}
}
