package schemas

import (
	"encoding/json"
	"time"
)

// Command is a decoded command event (docs/events.md#command-events). Decoding fills every field or
// returns a *DecodeError; an executor never sees a half-valid Command.
type Command struct {
	ID              string
	Source          string
	Type            string // the action
	Subject         string // the entity
	IdempotencyKey  string // defaulted to Source + "/" + ID
	ExpectedVersion *int64
	Deadline        *time.Time
	TraceParent     string
	Data            json.RawMessage // a JSON object, or nil when absent
	Fingerprint     string          // "sha256:<hex>" over type, subject, canonical data
	// ControlKeyID and ControlSig sign an operator decision (docs/guarantees.md):
	// the id of the key in the control key file and the HMAC-SHA256 of
	// the command's canonical content (SignControl). Empty on others.
	ControlKeyID string
	ControlSig   string

	// Where the command was consumed.
	Partition int32
	Offset    int64
}
