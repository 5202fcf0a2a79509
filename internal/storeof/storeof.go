// Package storeof hands an executor's state (its Pebble index) to the
// packages of this module that read it beside the executor: the command
// line's record API and the executor's tests. It is a hook rather than a
// method of consumer.Executor so that the index, an internal package, stays
// out of the executor's public API.
package storeof

import (
	"context"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/schemas"
)

// Executor returns the state of ex, a *consumer.Executor; package consumer
// sets it when it is initialized. The store is closed once ex.Run returns.
var Executor func(ex any) *dedupe.Store

// Settled waits until the transaction ex is committing, if any, is in its
// state (or has failed), or ctx ends. A transaction's outcome events are
// visible to consumers as soon as the broker commits it, one local write
// before the state holds its records: a reader that misses a record waits
// here and looks again, so a client that has read an outcome finds its
// record. ex is a *consumer.Executor; for anything else it returns at once.
var Settled = func(ex any, ctx context.Context) error { return nil }

// Intents lists the intents (in_progress records) of ex's executions in
// flight. An intent is not in the state until the next record of its key
// replaces it (DESIGN.md, "An intent stays out of Pebble until its record
// is replaced"): a reader of the state takes these as the newer records
// of their keys. ex is a *consumer.Executor; for anything else, none.
var Intents = func(ex any) []schemas.Record { return nil }
