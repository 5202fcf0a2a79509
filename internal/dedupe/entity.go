package dedupe

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// EntityState is stored in a small binary layout (one is read and written
// for every command): a version byte, then varints and length-prefixed
// strings. Stores written before it hold JSON, which starts with '{' and
// is still read.
const entityFormatV1 = 0x01

func encodeEntity(es *EntityState) []byte {
	b := make([]byte, 0, 32+len(es.LastKey)+len(es.InFlightKey))
	b = append(b, entityFormatV1)
	b = binary.AppendVarint(b, es.Version)
	b = binary.AppendVarint(b, int64(es.Partition))
	b = binary.AppendUvarint(b, uint64(len(es.LastKey)))
	b = append(b, es.LastKey...)
	b = binary.AppendUvarint(b, uint64(len(es.InFlightKey)))
	return append(b, es.InFlightKey...)
}

var errEntityFormat = errors.New("malformed entity state")

func decodeEntity(val []byte, es *EntityState) error {
	if len(val) > 0 && val[0] == '{' {
		return json.Unmarshal(val, es)
	}
	if len(val) == 0 || val[0] != entityFormatV1 {
		return fmt.Errorf("%w: unknown format", errEntityFormat)
	}
	r := val[1:]
	varint := func() (int64, bool) {
		v, n := binary.Varint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	str := func() (string, bool) {
		l, n := binary.Uvarint(r)
		if n <= 0 || uint64(len(r)-n) < l {
			return "", false
		}
		s := string(r[n : n+int(l)])
		r = r[n+int(l):]
		return s, true
	}
	var ok [4]bool
	var part int64
	es.Version, ok[0] = varint()
	part, ok[1] = varint()
	es.Partition = int32(part)
	es.LastKey, ok[2] = str()
	es.InFlightKey, ok[3] = str()
	for _, o := range ok {
		if !o {
			return errEntityFormat
		}
	}
	// States written before 2026-12-01 end with the in-flight deadline,
	// which is no longer kept (the record has it).
	if len(r) > 0 {
		if _, ok := varint(); !ok || len(r) > 0 {
			return errEntityFormat
		}
	}
	return nil
}
