// Package audit is the old home of the audit, kept as a thin forwarder to
// the public package github.com/onceflight/onceflight/audit so that code
// written against it (consumer's tests) keeps compiling while it moves.
// New code imports the public package.
//
// Deprecated: use github.com/onceflight/onceflight/audit.
package audit

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/audit"
)

// Aliases of the public package's types and names.
type (
	Options     = audit.Options
	Report      = audit.Report
	CheckResult = audit.CheckResult
	Violation   = audit.Violation
	Counts      = audit.Counts
	Input       = audit.Input
)

// Check names.
const (
	CheckHashChain    = audit.CheckHashChain
	CheckAnswered     = audit.CheckAnswered
	CheckOutcomeIDs   = audit.CheckOutcomeIDs
	CheckOncePerKey   = audit.CheckOncePerKey
	CheckSingleFlight = audit.CheckSingleFlight
)

// ErrBadPartition is audit.ErrBadPartition.
var ErrBadPartition = audit.ErrBadPartition

// Run is audit.Run through cl.
func Run(ctx context.Context, cl *kgo.Client, opts Options) (Report, error) {
	opts.Client = cl
	return audit.Run(ctx, opts)
}

// Check is audit.Check.
func Check(in Input) Report { return audit.Check(in) }
