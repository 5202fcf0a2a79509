package dedupe

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestEntityEncoding(t *testing.T) {
	for _, es := range []EntityState{
		{},
		{Version: 7, Partition: 11, LastKey: "k-1", InFlightKey: "k-2", InFlightDeadline: time.Date(2026, 12, 1, 10, 0, 0, 5, time.UTC)},
		{Version: -1, Partition: 1<<31 - 1, LastKey: "ü\x00x"},
	} {
		var got EntityState
		if err := decodeEntity(encodeEntity(&es), &got); err != nil || got != es {
			t.Errorf("round trip %+v: %+v, %v", es, got, err)
		}
		// Stores written before the binary layout hold JSON.
		legacy, _ := json.Marshal(es)
		got = EntityState{}
		if err := decodeEntity(legacy, &got); err != nil || !got.InFlightDeadline.Equal(es.InFlightDeadline) || got.LastKey != es.LastKey || got.Version != es.Version {
			t.Errorf("legacy %s: %+v, %v", legacy, got, err)
		}
	}
	b := encodeEntity(&EntityState{LastKey: "abcdef"})
	for i := 0; i < len(b); i++ {
		var got EntityState
		if err := decodeEntity(b[:i], &got); !errors.Is(err, errEntityFormat) {
			t.Errorf("truncated to %d: %v", i, err)
		}
	}
}
