package schemas_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/onceflight/onceflight/internal/wire"

	. "github.com/onceflight/onceflight/schemas"
)

// indexFields is what UnmarshalRecordIndex promises to decode.
func indexFields(r Record) Record {
	out := Record{IdempotencyKey: r.IdempotencyKey, Entity: r.Entity, Action: r.Action, Status: r.Status,
		EntityVersion: r.EntityVersion, FinishedAt: r.FinishedAt, Epoch: r.Epoch, FencingToken: r.FencingToken,
		Release: r.Release, UniqueKey: r.UniqueKey, Hash: r.Hash}
	out.Command.Partition = r.Command.Partition
	return out
}

// FuzzUnmarshalRecordIndex: the index decoder fails exactly where
// UnmarshalRecord fails, and where it does not, the fields it promises
// equal UnmarshalRecord's (a restore decoding less must build the same
// index).
func FuzzUnmarshalRecordIndex(f *testing.F) {
	addRecordSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		full, ferr := UnmarshalRecord(in)
		got, err := UnmarshalRecordIndex(in)
		if (err == nil) != (ferr == nil) {
			t.Fatalf("decode %q: index decoder error %v, whole decoder error %v", in, err, ferr)
		}
		if err != nil {
			return
		}
		if want := indexFields(full); !reflect.DeepEqual(indexFields(got), want) {
			t.Fatalf("decode %q\nindex %+v\nwhole %+v", in, indexFields(got), want)
		}
	})
}

// FuzzUnmarshalRecordKeep: the decoder that keeps its input fails exactly
// where UnmarshalRecord fails and decodes the same record, and the record
// it returns does not change when the caller's other copies of the bytes
// do (it keeps only its own).
func FuzzUnmarshalRecordKeep(f *testing.F) {
	addRecordSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		full, ferr := UnmarshalRecord(in)
		got, err := UnmarshalRecordKeep(bytes.Clone(in))
		if (err == nil) != (ferr == nil) {
			t.Fatalf("decode %q: keeping decoder error %v, UnmarshalRecord error %v", in, err, ferr)
		}
		if err == nil && !reflect.DeepEqual(got, full) {
			t.Fatalf("decode %q\nkeep %+v\nwhole %+v", in, got, full)
		}
	})
}

// TestUnmarshalRecordKeepShares: the record's strings, data and result are
// the buffer it was given, not copies (one allocation per member was most
// of a repeat's decode), and data cannot grow into the rest of it.
func TestUnmarshalRecordKeepShares(t *testing.T) {
	rec := evidenceRecord()
	rec.Result = json.RawMessage(`{"id":"r-1"}`)
	b, err := wire.SealRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalRecordKeep(b)
	if err != nil {
		t.Fatal(err)
	}
	within := func(name string, p *byte) {
		t.Helper()
		if s := unsafe.Pointer(p); uintptr(s) < uintptr(unsafe.Pointer(&b[0])) || uintptr(s) >= uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b)) {
			t.Errorf("%s is a copy, not a piece of the buffer", name)
		}
	}
	within("idempotency_key", unsafe.StringData(got.IdempotencyKey))
	within("entity", unsafe.StringData(got.Entity))
	within("hash", unsafe.StringData(got.Hash))
	within("evidence detail", unsafe.StringData(got.Evidence[0].Detail))
	within("data", &got.Data[0])
	within("result", &got.Result[0])
	if cap(got.Data) != len(got.Data) {
		t.Errorf("data has room %d past its end: an append would write into the record's other members", cap(got.Data)-len(got.Data))
	}
	again, err := wire.MarshalRecord(got)
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("round trip %v\n%s\nwant\n%s", err, again, b)
	}
	n := testing.AllocsPerRun(100, func() {
		if _, err := UnmarshalRecordKeep(b); err != nil {
			t.Fatal(err)
		}
	})
	// The error, one slab for the four times, the evidence slice (grown
	// once); no string or raw member is allocated.
	if n > 4 {
		t.Errorf("%v allocations per decode, want at most 4", n)
	}
}

// BenchmarkUnmarshalRecord prices a repeat's decode of its stored record
// (evidence, 200 bytes of data): copied member by member, and kept.
func BenchmarkUnmarshalRecord(b *testing.B) {
	rec := evidenceRecord()
	rec.Data = json.RawMessage(`{"amount":1250,"currency":"EUR","note":"` + strings.Repeat("x", 150) + `"}`)
	raw, err := wire.SealRecord(&rec)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("copy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := UnmarshalRecord(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("keep", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := UnmarshalRecordKeep(bytes.Clone(raw)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
