package console

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// runAudits runs a until the end of the test and waits for its first
// result.
func runAudits(t *testing.T, a *Audits) AuditResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var r AuditResult
	onceflighttest.WaitFor(t, 60*time.Second, "the first audit", func() bool {
		var ok bool
		r, ok = a.Last()
		return ok
	})
	return r
}

// TestConsoleShowsTheLastAudit: with audits, the overview shows the last
// audit of the real topics (every check holding), an audit that could
// not run (Kafka unreachable) and the checks that failed; without, it
// points to onceflight audit.
func TestConsoleShowsTheLastAudit(t *testing.T) {
	e := newEnv(t)
	for _, k := range []string{"ping-1", "ping-2"} {
		e.h.Submit("c-"+k, "customer-1", k, `{}`)
		waitExec(t, e.p, "customer-1", k, schemas.StatusSucceeded)
	}
	overview := func(url string) string {
		t.Helper()
		code, body := get(t, url+"/", e.reader)
		if code != http.StatusOK {
			t.Fatalf("overview: %d\n%s", code, body)
		}
		return body
	}

	real := NewAudits(time.Hour, func(ctx context.Context) (audit.Report, error) {
		return audit.Run(ctx, audit.Options{Brokers: e.h.Brokers, ControlKeys: e.keys})
	}, nil)
	if r := runAudits(t, real); !r.OK() || r.Commands < 2 || r.Checks == 0 {
		t.Fatalf("audit of the harness's topics: %+v", r)
	}
	if body := overview(e.serve(Config{Audits: real})); !strings.Contains(body, "checks hold over") {
		t.Errorf("the overview does not show the passing audit:\n%s", body)
	}
	if body := overview(e.url); !strings.Contains(body, "does not audit the topics") || !strings.Contains(body, "onceflight audit") {
		t.Errorf("a console without audits does not point to onceflight audit:\n%s", body)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	unreachable := NewAudits(time.Hour, func(ctx context.Context) (audit.Report, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return audit.Run(ctx, audit.Options{Brokers: []string{dead}})
	}, nil)
	if r := runAudits(t, unreachable); r.Err == "" {
		t.Errorf("an audit of an unreachable cluster: %+v", r)
	}
	if body := overview(e.serve(Config{Audits: unreachable})); !strings.Contains(body, "The last audit could not run") {
		t.Errorf("the overview does not say the audit could not run:\n%s", body)
	}

	// How a failed audit reads (the report of a broken journal, as
	// audit.Run gives it).
	broken := NewAudits(time.Hour, func(context.Context) (audit.Report, error) {
		return audit.Report{Checks: []audit.CheckResult{{Name: "hash_chain", Guarantee: "G5", OK: true}, {Name: "once_per_key", Guarantee: "G2", Count: 2}},
			Counts: audit.Counts{Commands: 7}}, nil
	}, nil)
	runAudits(t, broken)
	if body := overview(e.serve(Config{Audits: broken})); !strings.Contains(body, "1 of 2 checks fail") || !strings.Contains(body, "once_per_key (G2): 2 violation(s)") {
		t.Errorf("the overview does not name the failed check:\n%s", body)
	}
}
