package schemas_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	. "github.com/onceflight/onceflight/schemas"
)

func TestStatusRoundTripAndBadRecords(t *testing.T) {
	s := ExecutorStatus{Executor: "ex-1", At: time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC), EveryMS: 10000, Ready: false,
		Owned: []int32{0, 3}, Held: []HeldPartition{{Partition: 3, Reason: "journal lost records"}}, Paused: []int32{0}, Halted: "partition count changed"}
	got, ok, err := DecodeStatus([]byte("ex-1"), wire.EncodeStatus(s))
	s.V = StatusVersion
	if err != nil || !ok || !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: %+v %v %v, want %+v", got, ok, err, s)
	}
	if _, ok, err := DecodeStatus([]byte("ex-1"), nil); ok || err != nil {
		t.Fatalf("tombstone: ok %v err %v, want neither", ok, err)
	}
	for _, c := range []struct{ key, value, want string }{
		{"ex-1", "", "EOF"},
		{"ex-1", "{", "unexpected EOF"},
		{"ex-1", "[]", "cannot unmarshal array"},
		{"ex-1", `{"v":1,"executor":"ex-1","at":"2026-12-02T08:00:00Z","every_ms":1000} {}`, "data after"},
		{"ex-1", `{"v":2,"executor":"ex-1","at":"2026-12-02T08:00:00Z","every_ms":1000}`, "version 2"},
		{"ex-1", `{"v":1,"at":"2026-12-02T08:00:00Z","every_ms":1000}`, "no executor"},
		{"ex-2", `{"v":1,"executor":"ex-1","at":"2026-12-02T08:00:00Z","every_ms":1000}`, `key "ex-2" is not its executor "ex-1"`},
		{"ex-1", `{"v":1,"executor":"ex-1","every_ms":1000}`, "no time"},
		{"ex-1", `{"v":1,"executor":"ex-1","at":"2026-12-02T08:00:00Z","every_ms":0}`, "every_ms 0"},
		{"ex-1", `{"v":1,"executor":"ex-1","at":"2026-12-02T08:00:00Z","every_ms":1000,"owned":[-1]}`, "negative partition -1"},
		{"ex-1", `{"v":1,"executor":"ex-1","at":"2026-12-02T08:00:00Z","every_ms":1000,"owned":[1],"held":[{"partition":2}]}`, "held partition 2 is not owned"},
		{"ex-1", `{"v":1,"executor":"ex-1","at":"2026-12-02T08:00:00Z","every_ms":1000,"owned":[1],"paused":[3]}`, "paused partition 3 is not owned"},
		{"ex-1", `{"v":1,"executor":"ex-1","at":"yesterday","every_ms":1000}`, "cannot parse"},
	} {
		_, ok, err := DecodeStatus([]byte(c.key), []byte(c.value))
		if ok || !errors.Is(err, ErrBadStatus) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ok %v err %v, want ErrBadStatus naming %q", c.value, ok, err, c.want)
		}
	}
	big := make([]byte, MaxStatusBytes+1)
	if _, _, err := DecodeStatus([]byte("ex-1"), big); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("oversized status: %v", err)
	}
}

// FuzzDecodeStatus: any key and value decode to a status, a tombstone or
// an ErrBadStatus error, never a panic; a status decoded once encodes to
// one that decodes to the same.
func FuzzDecodeStatus(f *testing.F) {
	f.Add([]byte("ex-1"), wire.EncodeStatus(ExecutorStatus{Executor: "ex-1", At: time.Unix(1, 0).UTC(), EveryMS: 1, Owned: []int32{1}, Held: []HeldPartition{{1, "r"}}}))
	f.Add([]byte("ex-1"), []byte(`{"v":1,"executor":"ex-1","at":"2026-12-02T08:00:00Z","every_ms":1000,"owned":[2147483647]}`))
	f.Add([]byte(""), []byte("null"))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		s, ok, err := DecodeStatus(key, value)
		if err != nil {
			if ok || !errors.Is(err, ErrBadStatus) {
				t.Fatalf("error %v with ok %v, or not ErrBadStatus", err, ok)
			}
			return
		}
		if !ok {
			return
		}
		again, ok, err := DecodeStatus(key, wire.EncodeStatus(s))
		if err != nil || !ok || !reflect.DeepEqual(again, s) {
			t.Fatalf("re-encoded %+v decodes to %+v %v %v", s, again, ok, err)
		}
	})
}
