package schemas

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/jcs"
)

// EncodeCommand encodes c as a command record that DecodeCommand accepts
// (used by the submit CLI and tests). Key = subject; Topic is left empty.
// Optional attributes are included when set; IdempotencyKey is included when
// non-empty even if it equals the default. Partition, Offset and Fingerprint
// are ignored: they are properties of a consumed record.
func EncodeCommand(c Command, mode Mode) (*kgo.Record, error) {
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetID(c.ID)
	ev.SetSource(c.Source)
	ev.SetType(c.Type)
	ev.SetSubject(c.Subject)
	if c.IdempotencyKey != "" {
		ev.SetExtension(ExtIdempotencyKey, c.IdempotencyKey)
	}
	if c.ExpectedVersion != nil {
		// CloudEvents Integer is 32-bit: larger versions travel as strings,
		// which DecodeCommand accepts too.
		if v := *c.ExpectedVersion; v >= math.MinInt32 && v <= math.MaxInt32 && mode == Structured {
			ev.SetExtension(ExtExpectedVersion, int32(v))
		} else {
			ev.SetExtension(ExtExpectedVersion, strconv.FormatInt(v, 10))
		}
	}
	if c.Deadline != nil {
		ev.SetExtension(ExtDeadline, c.Deadline.Format(time.RFC3339Nano))
	}
	if c.ControlKeyID != "" {
		ev.SetExtension(ExtControlKeyID, c.ControlKeyID)
	}
	if c.ControlSig != "" {
		ev.SetExtension(ExtControlSig, c.ControlSig)
	}
	if c.TraceParent != "" {
		ev.SetExtension(ExtTraceParent, c.TraceParent)
	}
	if len(c.Data) > 0 {
		// The data goes in as it is, inline JSON: ev.SetData would pass it
		// through json.Marshal, which HTML-escapes '<', '>' and '&' into
		// six bytes each (200 KB of HTML became 490 KB).
		if !json.Valid(c.Data) {
			return nil, fmt.Errorf("encode command %q: data is not valid JSON", c.ID)
		}
		// Refused here with its reason, rather than sent and answered
		// rejected invalid_command.
		if err := CheckIJSON(c.Data); err != nil {
			return nil, fmt.Errorf("encode command %q: data is not I-JSON (RFC 7493): %w", c.ID, err)
		}
		ev.SetDataContentType(event.ApplicationJSON)
		ev.DataEncoded = []byte(c.Data)
		ev.DataBase64 = false
	}
	rec, err := toRecord(&ev, mode)
	if err != nil {
		return nil, fmt.Errorf("encode command %q: %w", c.ID, err)
	}
	return rec, nil
}

// CheckIJSON says why the JSON text data is not what DecodeCommand holds
// a command's data to besides being an object of bounded size: I-JSON
// (RFC 7493: no number beyond an IEEE 754 double, strings of valid
// Unicode) without a member name twice (jcs.CanonicalData); nil when it
// is. Producers (EncodeCommand, the HTTP ingress) ask it so that such
// data is refused with its reason instead of sent and answered rejected
// invalid_command. Data in canonical form (the benchmark's) is I-JSON
// already, which a scan tells.
func CheckIJSON(data []byte) error {
	if jcs.IsCanonical(data) {
		return nil
	}
	_, err := jcs.CanonicalData(data)
	return err
}
