package schemas_test

import (
	"reflect"
	"testing"

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
