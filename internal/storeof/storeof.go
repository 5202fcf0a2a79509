// Package storeof hands an executor's state (its Pebble index) to the
// packages of this module that read it beside the executor: the command
// line's record API and the executor's tests. It is a hook rather than a
// method of consumer.Executor so that the index, an internal package, stays
// out of the executor's public API.
package storeof

import "github.com/onceflight/onceflight/internal/dedupe"

// Executor returns the state of ex, a *consumer.Executor; package consumer
// sets it when it is initialized. The store is closed once ex.Run returns.
var Executor func(ex any) *dedupe.Store
