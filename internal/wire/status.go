package wire

import (
	"encoding/json"

	"github.com/onceflight/onceflight/schemas"
)

// EncodeStatus returns the value of s's status record.
func EncodeStatus(s schemas.ExecutorStatus) []byte {
	s.V = schemas.StatusVersion
	b, _ := json.Marshal(s) // strings, numbers, lists and a time of years 0-9999 (time.Now): cannot fail
	return b
}
