package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// StatusVersion is the version of the status record (docs/events.md,
// "Executor status").
const StatusVersion = 1

// maxStatusBytes bounds a status record: its lists are partition numbers
// and short reasons, so anything larger is not a status.
const maxStatusBytes = 1 << 20

// ExecutorStatus is what one executor says about the partitions it owns,
// published to the status topic (Topics.Status) keyed by its executor id,
// because only the executor knows whether it holds, pauses or halted them
// while a projection of the topics (the console) must show it. The topic
// is compacted: its latest record per executor is that executor's state.
type ExecutorStatus struct {
	V        int       `json:"v"`
	Executor string    `json:"executor"`
	At       time.Time `json:"at"`
	// EveryMS is how often the executor publishes (besides on a change):
	// a reader takes a status older than a few of these as unknown.
	EveryMS int64 `json:"every_ms"`
	// Ready is what the executor's /readyz says.
	Ready bool `json:"ready"`
	// Owned lists the partitions the executor owns, ascending.
	Owned []int32 `json:"owned"`
	// Held lists owned partitions not processed, with why.
	Held []HeldPartition `json:"held,omitempty"`
	// Paused lists owned partitions whose fetching is paused by their
	// buffer bounds.
	Paused []int32 `json:"paused,omitempty"`
	// Halted says why the executor stopped taking work, "" if it did not.
	Halted string `json:"halted,omitempty"`
}

// HeldPartition is one held partition and why it is held.
type HeldPartition struct {
	Partition int32  `json:"partition"`
	Reason    string `json:"reason"`
}

// ErrBadStatus is wrapped by every error of DecodeStatus.
var ErrBadStatus = errors.New("not an executor status record")

// DecodeStatus decodes a status record with key and value. A tombstone
// (nil value) is an executor that left: ok false, no error. Any other
// record that is not a valid status is an error wrapping ErrBadStatus
// and naming the problem.
func DecodeStatus(key, value []byte) (s ExecutorStatus, ok bool, err error) {
	if value == nil {
		return s, false, nil
	}
	bad := func(format string, a ...any) (ExecutorStatus, bool, error) {
		return ExecutorStatus{}, false, fmt.Errorf("%w: %s", ErrBadStatus, fmt.Sprintf(format, a...))
	}
	if len(value) > maxStatusBytes {
		return bad("%d bytes, at most %d", len(value), maxStatusBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	if err := dec.Decode(&s); err != nil {
		return bad("%v", err)
	}
	if dec.More() {
		return bad("data after the JSON object")
	}
	switch {
	case s.V != StatusVersion:
		return bad("version %d, this build reads %d", s.V, StatusVersion)
	case s.Executor == "":
		return bad("no executor")
	case string(key) != s.Executor:
		return bad("key %q is not its executor %q", key, s.Executor)
	case s.At.IsZero():
		return bad("no time")
	case s.EveryMS <= 0:
		return bad("every_ms %d, must be positive", s.EveryMS)
	}
	for _, p := range s.Owned {
		if p < 0 {
			return bad("negative partition %d", p)
		}
	}
	for _, h := range s.Held {
		if !slices.Contains(s.Owned, h.Partition) {
			return bad("held partition %d is not owned", h.Partition)
		}
	}
	for _, p := range s.Paused {
		if !slices.Contains(s.Owned, p) {
			return bad("paused partition %d is not owned", p)
		}
	}
	return s, true, nil
}

// Every is how often the executor publishes its status.
func (s ExecutorStatus) Every() time.Duration { return time.Duration(s.EveryMS) * time.Millisecond }
