package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// auditReport is the part of `onceflight audit --format json` the table
// shows.
type auditReport struct {
	Checks []struct {
		Name  string `json:"name"`
		OK    bool   `json:"ok"`
		Count int    `json:"count"`
	} `json:"checks"`
	Counts struct {
		Commands int `json:"commands"`
		Outcomes int `json:"outcomes"`
		Pending  int `json:"pending"`
	} `json:"counts"`
}

// verdict is the audit's result in a few words for the table.
func (a auditReport) verdict() string {
	var failed []string
	for _, c := range a.Checks {
		if !c.OK {
			failed = append(failed, fmt.Sprintf("%s(%d)", c.Name, c.Count))
		}
	}
	if len(failed) > 0 {
		return "FAIL " + strings.Join(failed, ",")
	}
	s := fmt.Sprintf("pass %d cmds", a.Counts.Commands)
	if a.Counts.Pending > 0 {
		s += fmt.Sprintf(", %d pending", a.Counts.Pending)
	}
	return s
}

// runAudit runs `onceflight audit` on the run's topics and returns its
// verdict. Exit code 5 means a check failed (the report is still read);
// any other failure means the audit could not run.
func (b *bench) runAudit(ctx context.Context, phase string) (string, error) {
	v, _, err := b.timedAudit(ctx, phase)
	return v, err
}

// timedAudit is runAudit that also returns the audit process's peak RSS
// in bytes (0 if unknown).
func (b *bench) timedAudit(ctx context.Context, phase string) (string, int64, error) {
	args := append([]string{"audit", "--format", "json", "--group", b.group}, b.kafkaArgs()...)
	cmd := exec.CommandContext(ctx, b.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	rss, runErr := runWatchingHWM(cmd)
	v, err := b.auditVerdict(phase, runErr, out.Bytes(), errb.String())
	return v, rss, err
}

// auditVerdict reads an audit's JSON report into a verdict.
func (b *bench) auditVerdict(phase string, runErr error, out []byte, stderr string) (string, error) {
	_ = os.WriteFile(filepath.Join(b.dir, "audit-"+phase+".json"), out, 0o644)
	var ee *exec.ExitError
	if runErr != nil && (!errors.As(runErr, &ee) || ee.ExitCode() != 5) {
		return "error", fmt.Errorf("audit after %s: %w: %s", phase, runErr, strings.TrimSpace(stderr))
	}
	var rep auditReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return "error", fmt.Errorf("audit after %s: decode report: %w", phase, err)
	}
	v := rep.verdict()
	if strings.HasPrefix(v, "FAIL") {
		return v, fmt.Errorf("audit after %s failed: %s (report in %s)", phase, v, filepath.Join(b.dir, "audit-"+phase+".json"))
	}
	return v, nil
}
