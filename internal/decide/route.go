package decide

import (
	"errors"

	"github.com/onceflight/onceflight/schemas"
)

// Verdicts of routing (RouteRows), besides Reject.
const (
	// Deadletter copies the record to the deadletter topic; when its
	// entity can be read (Code set) it is answered rejected too.
	Deadletter Verdict = "deadletter"
	// BuildCopy asks the executor for the forward copy of a misrouted
	// command (whether it fits the commands topic), then to decide again.
	BuildCopy Verdict = "build_copy"
	// Forward copies the command to its entity's partition, where it is
	// executed; it is answered there, not here.
	Forward Verdict = "forward"
	// Dispatch queues the command for its entity, to be decided by Command
	// in the entity's single flight.
	Dispatch Verdict = "dispatch"
)

// RouteInput is what routing a polled record depends on: what decoding it
// said, and where it landed against where its entity lives.
type RouteInput struct {
	// DecodeErr is what decoding the record said (nil: a command).
	DecodeErr error
	// Partition is where the record landed; Want is its entity's
	// partition (for a command that decoded).
	Partition, Want int32
	// CopyKnown says CopyErr was looked up (after BuildCopy): why the
	// forward copy cannot be written (nil: it fits).
	CopyKnown bool
	CopyErr   error
}

// RouteRows is the routing table, tried in order for each polled record
// before any record of its key is read.
var RouteRows = []Row{
	{"undecodable", "the record is not a command (not CloudEvents, a required field missing or malformed, data over `--max-data-bytes`)", "deadlettered; answered `rejected invalid_command` when its entity can be read"},
	{"misrouted-copy", "the command is not on its entity's partition, and its forward copy is not built yet", "the executor builds the copy and decides again"},
	{"too-large-to-forward", "the copy would not fit the commands topic", "deadlettered by reference and answered `rejected too_large`; never executed out of place"},
	{"forward", "the command is not on its entity's partition", "forwarded to its entity's partition and executed there ([misrouted commands](#misrouted-commands))"},
	{"dispatch", "none of the above", "queued for its entity, decided by the command table in the entity's single flight"},
}

// Route decides what happens to a polled record before it reaches its
// entity. For Deadletter, Message is the deadletter reason and Code, when
// set, the rejection its entity is answered with; for Reject (too large
// to forward) the command is also deadlettered by reference
// (Decision.Deadletter).
func Route(in RouteInput) Decision {
	if err := in.DecodeErr; err != nil {
		d := Decision{Row: "undecodable", Verdict: Deadletter, Message: err.Error()}
		var de *schemas.DecodeError
		if errors.As(err, &de) {
			d.Message = de.Reason
			if de.Entity != "" {
				d.Code = schemas.CodeInvalidCommand
			}
		}
		return d
	}
	if in.Partition != in.Want {
		switch {
		case !in.CopyKnown:
			return Decision{Row: "misrouted-copy", Verdict: BuildCopy}
		case in.CopyErr != nil:
			return Decision{Row: "too-large-to-forward", Verdict: Reject, Code: schemas.CodeTooLarge, Message: in.CopyErr.Error(), Deadletter: true}
		default:
			return Decision{Row: "forward", Verdict: Forward}
		}
	}
	return Decision{Row: "dispatch", Verdict: Dispatch}
}
