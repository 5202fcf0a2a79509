package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// These tests cover the repeat floor's logic (its keys, its index, its
// rows); nothing here measures or asserts a speed.

func floorBench(random bool) *bench {
	return &bench{entities: 100, partitions: 12, randomKeys: random, data: benchData(200),
		topics: schemas.Topics{Commands: "t.commands"}}
}

// floorInputs are commands [0, n) of spec as the floor consumes them:
// their Kafka records with a partition and an offset.
func floorInputs(t *testing.T, b *bench, spec cmdSpec, n int) []*kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		r, err := b.command(spec, i)
		if err != nil {
			t.Fatal(err)
		}
		r.Partition, r.Offset = int32(i%12), int64(i/12)
		recs[i] = r
	}
	return recs
}

func fetchesOf(recs []*kgo.Record) kgo.Fetches {
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "in", Partitions: []kgo.FetchPartition{{Records: recs}}}}}}
}

func TestAttr(t *testing.T) {
	for _, random := range []bool{false, true} {
		b := floorBench(random)
		spec := cmdSpec{action: "bench.noop", idPrefix: "rawr", keyPrefix: "rrk"}
		r, err := b.command(spec, 7)
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := schemas.DecodeCommand(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		if k, err := attr(r.Value, schemas.ExtIdempotencyKey); err != nil || k != cmd.IdempotencyKey {
			t.Errorf("random %v: key %q (%v), the decoder's %q", random, k, err, cmd.IdempotencyKey)
		}
		if id, err := attr(r.Value, "id"); err != nil || id != cmd.ID {
			t.Errorf("random %v: id %q (%v), the decoder's %q", random, id, err, cmd.ID)
		}
	}
	if _, err := attr([]byte(`{"id":"a"}`), "idempotencykey"); err == nil {
		t.Error("no attribute: no error")
	}
	if _, err := attr([]byte(`{"idempotencykey":"a\"b"}`), "idempotencykey"); err == nil {
		t.Error("an escaped value: no error")
	}
}

// TestRepeatFloorStoresAndFindsEveryInput: the floor's index holds one
// record per input, of the executor's shape, and a poll's lookup (in any
// order, any poll size) finds each input's record, its own bytes; an
// input that was never stored is an error, not a silent miss.
func TestRepeatFloorStoresAndFindsEveryInput(t *testing.T) {
	for _, random := range []bool{false, true} {
		b := floorBench(random)
		spec := cmdSpec{action: "bench.noop", idPrefix: "rawr", keyPrefix: "rrk"}
		const n = 3000
		in := floorInputs(t, b, spec, n+1)
		f, err := openRepeatFloor(t.TempDir(), "ofb.executor", b.data)
		if err != nil {
			t.Fatal(err)
		}
		defer f.close()
		for _, poll := range [][]*kgo.Record{in[:1000], in[1000:n]} {
			if err := f.store(poll); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := f.reopen(ctx); err != nil {
			t.Fatal(err)
		}
		if f.stored != n || f.bytes < 900*n || f.bytes > 1200*n {
			t.Fatalf("random %v: stored %d records, %d bytes; want %d of ~1 KB", random, f.stored, f.bytes, n)
		}
		shuffled := append([]*kgo.Record(nil), in[:n]...)
		rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		seen := 0
		for _, poll := range [][]*kgo.Record{shuffled[:17], shuffled[17:2500], shuffled[2500:]} {
			recs, err := f.lookup(fetchesOf(poll))
			if err != nil {
				t.Fatalf("random %v: %v", random, err)
			}
			if len(recs) != len(poll) {
				t.Fatalf("%d inputs back for %d", len(recs), len(poll))
			}
			for i, r := range recs {
				val, _, _ := f.pfs[i].Value()
				var got schemas.Record
				if err := json.Unmarshal(val, &got); err != nil {
					t.Fatal(err)
				}
				key, _ := attr(r.Value, schemas.ExtIdempotencyKey)
				if got.IdempotencyKey != key || got.Entity != string(r.Key) || got.Command.Offset != r.Offset ||
					got.Status != schemas.StatusSucceeded || len(got.Evidence) != 1 || got.Hash == "" || string(got.Data) != string(b.data) {
					t.Fatalf("input %s/%s: record %+v", r.Key, key, got)
				}
				seen++
			}
		}
		if seen != n {
			t.Errorf("%d of %d inputs found", seen, n)
		}
		if _, err := f.lookup(fetchesOf(in[n:])); err == nil || !strings.Contains(err.Error(), "found false") {
			t.Errorf("an input never stored: %v, want an error", err)
		}
	}
}

func TestRawRepeatRow(t *testing.T) {
	r := rawRepeatResult{rawResult: rawResult{inputs: 50_000, elapsed: time.Second, cpu: 400 * time.Millisecond, polls: 10}, passes: 2,
		keys: 50_000, valueBytes: 50_000 * 1010}
	got := rawRepeatRow(r, 6)
	if got.Phase != "raw" || got.Value != 50_000 || got.CPUPerCmd != 8 || got.Ratio != 0.75 ||
		!strings.Contains(got.Note, "index of 50000 records (1010 B each") || !strings.Contains(got.Note, "50000 inputs in 2 passes") || !strings.Contains(got.Note, "10 polls (5000 per poll)") {
		t.Errorf("row %+v", got)
	}
	if got := rawRepeatRow(r, 0); got.Ratio != 0 {
		t.Errorf("no raw new floor: ratio %v, want none", got.Ratio)
	}
	if got := rawRepeatRow(rawRepeatResult{}, 6); got.Value != 0 || got.CPUPerCmd != 0 || got.Ratio != 0 {
		t.Errorf("not measured: %+v", got)
	}
}

func TestRawRepeatPassesAddUp(t *testing.T) {
	var res rawRepeatResult
	res.add(rawResult{inputs: 10, polls: 2, elapsed: time.Second, cpu: 3 * time.Millisecond, brokerCPU: time.Millisecond})
	res.add(rawResult{inputs: 10, polls: 1, elapsed: 2 * time.Second, cpu: 5 * time.Millisecond, brokerCPU: 2 * time.Millisecond})
	want := rawResult{inputs: 20, polls: 3, elapsed: 3 * time.Second, cpu: 8 * time.Millisecond, brokerCPU: 3 * time.Millisecond}
	if res.passes != 2 || res.rawResult != want {
		t.Errorf("two passes: %+v, want %+v", res, want)
	}
}

func TestRepeatsFloorNote(t *testing.T) {
	got := repeatsFloorNote(30, 20, 6, 4)
	for _, want := range []string{"by CPU 30.0 / 20.0 µs = 1.50×", "the raw floors' 6.00 / 4.00 µs = 1.50×", "3× needs a repeat at 10.0 µs, 2.5× its floor (a new key is 5.0× its own)"} {
		if !strings.Contains(got, want) {
			t.Errorf("note %q lacks %q", got, want)
		}
	}
	if got := repeatsFloorNote(30, 20, 0, 4); got != "; by CPU 30.0 / 20.0 µs = 1.50×" {
		t.Errorf("without the floor: %q", got)
	}
	if got := repeatsFloorNote(0, 20, 6, 4); got != "" {
		t.Errorf("serve not measured: %q", got)
	}
}
