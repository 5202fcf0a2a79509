package wire

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

func TestEpochMarker(t *testing.T) {
	m := EpochMarker{Epoch: 17, Executor: "ex-\"1\"\u2028", Partitions: 12}
	v := EncodeEpochMarker(m)
	if string(v) != `{"epoch":17,"executor":"ex-\"1\"\u2028","partitions":12}` {
		t.Errorf("value %s", v)
	}
	if got := DecodeEpochMarker(&kgo.Record{Value: v}); got != m {
		t.Errorf("round trip %+v", got)
	}
	// Round-1 markers (fmt %q) and undecodable values fall back to the header.
	if got := DecodeEpochMarker(&kgo.Record{Value: []byte(`{"epoch":3,"executor":"x"}`)}); got.Epoch != 3 || got.Partitions != 0 {
		t.Errorf("old marker %+v", got)
	}
	bad := &kgo.Record{Value: []byte("junk"), Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindEpoch)}, {Key: schemas.HeaderEpoch, Value: []byte("9")}}}
	if got := DecodeEpochMarker(bad); got.Epoch != 9 || JournalKind(bad) != schemas.KindEpoch {
		t.Errorf("header fallback %+v kind %q", got, JournalKind(bad))
	}
}
