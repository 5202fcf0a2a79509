package dedupe

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestEntityEncoding(t *testing.T) {
	for _, es := range []EntityState{
		{},
		{Version: 7, Partition: 11, LastKey: "k-1", InFlightKey: "k-2"},
		{Version: -1, Partition: 1<<31 - 1, LastKey: "ü\x00x"},
	} {
		var got EntityState
		if err := decodeEntity(encodeEntity(&es), &got); err != nil || got != es {
			t.Errorf("round trip %+v: %+v, %v", es, got, err)
		}
		// Stores written before the binary layout hold JSON.
		legacy, _ := json.Marshal(es)
		got = EntityState{}
		if err := decodeEntity(legacy, &got); err != nil || got.InFlightKey != es.InFlightKey || got.LastKey != es.LastKey || got.Version != es.Version {
			t.Errorf("legacy %s: %+v, %v", legacy, got, err)
		}
	}
	// A state written with the deadline the layout used to end with.
	old := binary.AppendVarint(encodeEntity(&EntityState{Version: 2, InFlightKey: "k"}), time.Now().UnixNano())
	var got EntityState
	if err := decodeEntity(old, &got); err != nil || got != (EntityState{Version: 2, InFlightKey: "k"}) {
		t.Errorf("a state with the old trailing deadline: %+v, %v", got, err)
	}
	if err := decodeEntity(append(old, 1), &got); !errors.Is(err, errEntityFormat) {
		t.Errorf("trailing bytes after the old deadline: %v", err)
	}
	b := encodeEntity(&EntityState{LastKey: "abcdef"})
	for i := 0; i < len(b); i++ {
		var got EntityState
		if err := decodeEntity(b[:i], &got); !errors.Is(err, errEntityFormat) {
			t.Errorf("truncated to %d: %v", i, err)
		}
	}
}
