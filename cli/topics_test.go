package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceflight/onceflight/schemas"
)

// TestTopicsCheckApply: topics made by an earlier release (1 MiB
// max.message.bytes, a 7-day journal) are refused by serve, which names
// `topics apply`; check lists the rows (exit 6), apply raises them and
// leaves every other setting alone, a second apply changes nothing, and
// serve then starts on them. A compacted journal is never changed.
func TestTopicsCheckApply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr, cl := testBroker(ctx, t)
	adm := kadm.NewClient(cl)
	d := schemas.DefaultTopics()
	s := func(v string) *string { return &v }
	old := map[string]*string{"max.message.bytes": s("1048576")}
	oldJournal := map[string]*string{"max.message.bytes": s("1048576"), "retention.ms": s("604800000"), "retention.bytes": s("-1"),
		"cleanup.policy": s("delete"), "min.insync.replicas": s("1")}
	for _, tc := range []struct {
		name string
		cfg  map[string]*string
	}{{d.Commands, old}, {d.Outcomes, old}, {d.Deadletter, old}, {d.Journal, oldJournal}} {
		if _, err := adm.CreateTopic(ctx, 2, 1, tc.cfg, tc.name); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t)
	conn := []string{"--brokers", addr, "--config", cfg}

	code, out, errOut := execCLI(ctx, append([]string{"topics", "check"}, conn...)...)
	if code != exitTopicsNeedWork || !strings.Contains(errOut, "topics apply") {
		t.Fatalf("check on old topics: exit %d, want %d\n%s%s", code, exitTopicsNeedWork, out, errOut)
	}
	for _, want := range []string{`onceflight\.journal\s+retention\.ms\s+604800000 \(168h0m0s\)\s+at least 8467200000`, `onceflight\.commands\s+max\.message\.bytes\s+1048576\s+at least 4194304\s+apply raises it`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("check's table has no %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "apply raises it"); n != 5 {
		t.Errorf("check marks %d settings to raise, want 5 (4 max.message.bytes, retention.ms):\n%s", n, out)
	}

	// serve refuses them and names the command that fixes them.
	code, _, errOut = execCLI(ctx, "serve", "--brokers", addr, "--config", cfg, "--data-dir", t.TempDir(), "--http", freeAddr(t), "--partitions", "2")
	if code == exitOK || !strings.Contains(errOut, "onceflight topics apply") || !strings.Contains(errOut, "retention.ms is 604800000") {
		t.Fatalf("serve on old topics: exit %d\n%s", code, errOut)
	}

	code, out, errOut = execCLI(ctx, append([]string{"topics", "apply"}, conn...)...)
	if code != exitOK || strings.Count(out, "changed ") != 5 || !strings.Contains(out, "changed onceflight.journal retention.ms") {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = execCLI(ctx, append([]string{"topics", "apply"}, conn...)...)
	if code != exitOK || !strings.Contains(out, "nothing to change") {
		t.Fatalf("second apply: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = execCLI(ctx, append([]string{"topics", "check"}, conn...)...)
	if code != exitOK || strings.Contains(out, "apply raises it") {
		t.Fatalf("check after apply: exit %d\n%s%s", code, out, errOut)
	}
	// Nothing else was touched: the incremental alter kept the journal's
	// other settings.
	rc, err := adm.DescribeTopicConfigs(ctx, d.Journal)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc[0].Configs {
		if c.Key == "min.insync.replicas" && (c.Value == nil || *c.Value != "1") {
			t.Errorf("apply changed min.insync.replicas to %v", c.Value)
		}
	}
	serveSecured(t, addr, "actions:\n  noop.ping:\n    connector: noop\n", nil)

	// A compacted journal is reported, never changed.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: s("compact")}}, d.Journal); err != nil {
		t.Fatal(err)
	}
	code, out, _ = execCLI(ctx, append([]string{"topics", "apply"}, conn...)...)
	if code != exitTopicsNeedWork || !strings.Contains(out, "NOT changed onceflight.journal cleanup.policy") {
		t.Fatalf("apply on a compacted journal: exit %d\n%s", code, out)
	}
}
