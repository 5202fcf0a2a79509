package schemas

import (
	"encoding/json"
	"fmt"
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
