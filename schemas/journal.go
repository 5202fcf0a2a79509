package schemas

import (
	"encoding/json"
	"fmt"

	"github.com/onceflight/onceflight/internal/jcs"
)

// UnmarshalRecord decodes a record's JSON: records in the shape the
// encoder writes without reflection, anything else with encoding/json.
func UnmarshalRecord(b []byte) (Record, error) {
	var rec Record
	if decodeRecordFast(b, &rec) {
		return rec, nil
	}
	rec = Record{}
	if err := json.Unmarshal(b, &rec); err != nil {
		return Record{}, fmt.Errorf("unmarshal record: %w", err)
	}
	return rec, nil
}

// UnmarshalRecordKeep is UnmarshalRecord for a caller that gives b to the
// record: its strings, data and result point into b rather than into
// copies, so b must not be changed afterwards (nor while the record is
// used). The dedupe index copies a record's value out of Pebble's buffer
// once and decodes it with this on every repeat, where a copy per member
// was a third of the decode's allocations.
func UnmarshalRecordKeep(b []byte) (Record, error) {
	return unmarshalRecordWith(recDecoder{p: jcs.Parser{Src: b}, keep: true})
}

// UnmarshalRecordIndex is UnmarshalRecord for a reader that needs only
// what the dedupe index and an entity's state are built from: the
// idempotency key, entity, action, status, entity version, command
// partition, finished_at, epoch, fencing token, release, unique key and
// hash. Every other field is checked as UnmarshalRecord checks it (the
// same records decode and fail), but may be left zero: a restore rebuilding
// the index from the journal stores the journal value itself, and copying
// its result, data, evidence and strings it never reads was half of its
// decoding.
func UnmarshalRecordIndex(b []byte) (Record, error) {
	return unmarshalRecordWith(recDecoder{p: jcs.Parser{Src: b}, index: true})
}

// unmarshalRecordWith decodes d's source with d, or where d declines it,
// with UnmarshalRecord.
func unmarshalRecordWith(d recDecoder) (Record, error) {
	var rec Record
	if d.record(&rec) && d.end() {
		return rec, nil
	}
	return UnmarshalRecord(d.p.Src)
}
