package console

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/onceflight/onceflight/audit"
)

// AuditResult is the overview's line about the last audit of the topics
// (package audit, what `onceflight audit` runs).
type AuditResult struct {
	At   time.Time
	Took time.Duration
	// Err says why the audit could not run (Kafka unreachable, a topic
	// missing); the checks below are then empty.
	Err string
	// Checks is how many checks ran; Failed names those that do not
	// hold, with their violation counts.
	Checks   int
	Failed   []string
	Commands int
	Notes    []string
}

// OK reports whether the audit ran and every check held.
func (r AuditResult) OK() bool { return r.Err == "" && len(r.Failed) == 0 }

// Audits runs the audit on a schedule and keeps its last result for the
// overview. The audit reads the four topics through (a partition at a
// time, docs/memory.md#audit), so it runs only when the console is asked
// to (`onceflight console --audit-every`), one at a time.
type Audits struct {
	every time.Duration
	run   func(context.Context) (audit.Report, error)
	log   *slog.Logger
	mu    sync.Mutex
	last  *AuditResult // guarded by mu
}

// NewAudits returns Audits running run every interval once Run is called.
func NewAudits(every time.Duration, run func(context.Context) (audit.Report, error), log *slog.Logger) *Audits {
	if log == nil {
		log = slog.Default()
	}
	return &Audits{every: every, run: run, log: log}
}

// Every is the interval between audits.
func (a *Audits) Every() time.Duration { return a.every }

// Run audits at once and then every interval, until ctx ends.
func (a *Audits) Run(ctx context.Context) {
	for {
		start := time.Now()
		rep, err := a.run(ctx)
		if ctx.Err() != nil {
			return
		}
		r := AuditResult{At: start.UTC(), Took: time.Since(start).Round(time.Millisecond)}
		if err != nil {
			r.Err = err.Error()
			a.log.Warn("console: the audit could not run", "err", err)
		} else {
			r.Checks, r.Commands, r.Notes = len(rep.Checks), rep.Counts.Commands, rep.Notes
			for _, c := range rep.Checks {
				if !c.OK {
					r.Failed = append(r.Failed, fmt.Sprintf("%s (%s): %d violation(s)", c.Name, c.Guarantee, c.Count))
				}
			}
			if len(r.Failed) > 0 {
				a.log.Error("console: the audit found violations; run onceflight audit for where", "failed", r.Failed)
			} else {
				a.log.Info("console: the audit holds", "checks", r.Checks, "commands", r.Commands, "took", r.Took)
			}
		}
		a.mu.Lock()
		a.last = &r
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.every):
		}
	}
}

// Last returns the last result, false before the first audit finished.
func (a *Audits) Last() (AuditResult, bool) {
	if a == nil {
		return AuditResult{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return AuditResult{}, false
	}
	return *a.last, true
}
