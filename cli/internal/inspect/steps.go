package inspect

import (
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// The functions below let another reader of the same topics (the operator
// console's projection) tell the same story as Explain from steps it
// stored itself, rather than a second wording of every state.

// JournalStep is the timeline step of journal record r at partition p,
// offset off, stamped at; prev is the key's record before it (nil for the
// first), which the summary compares with.
func JournalStep(prev *schemas.Record, r schemas.Record, p int32, off int64, at time.Time) Step {
	return Step{Time: at, Source: "journal", Partition: p, Offset: off, Summary: summarize(prev, &r), Record: &r}
}

// OutcomeStep is the timeline step of outcome event ev; recordHash is the
// hash of the record it carries, which places it after that record.
func OutcomeStep(ev OutcomeEvent, recordHash string, p int32, off int64, at time.Time) Step {
	ev.hash = recordHash
	return Step{Time: at, Source: "outcomes", Partition: p, Offset: off, Summary: outcomeSummary(ev), Outcome: &ev}
}

// Order puts the steps of one (entity, key) in the order they happened,
// as Explain does.
func Order(steps []Step) []Step { return order(steps) }
