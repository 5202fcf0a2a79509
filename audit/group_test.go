package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/internal/client"
)

// An audit given a group the executors do not commit under reads no
// committed offsets: every command would count as pending, the answered
// check (G4) would check nothing, and the audit passed. The journal's
// records say executors ran and committed under their group, so it fails,
// saying why.
func TestAuditOfAnotherGroupFails(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.submit("c1", "order-1", "k1", `{}`, home("order-1"))
	h.submit("c2", "order-2", "k2", `{}`, home("order-2"))
	cl, err := client.New(h.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	auditUntil(t, cl, func(r audit.Report) bool { return r.OK() && r.Counts.Outcomes == 2 && r.Counts.Pending == 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := audit.Run(ctx, audit.Options{Client: cl, Group: "not-the-executors", MaxViolations: 5})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	_ = rep.WriteText(&text)
	if rep.OK() {
		t.Fatalf("an audit of a group with no committed offsets passed:\n%s", text.String())
	}
	for _, c := range rep.Checks {
		if c.Name == audit.CheckAnswered {
			if c.OK || len(c.Violations) != 1 || !strings.Contains(c.Violations[0].Message, `group "not-the-executors" has no committed offset`) {
				t.Fatalf("commands_answered: %+v", c)
			}
			continue
		}
		if !c.OK {
			t.Errorf("%s failed too: %+v", c.Name, c)
		}
	}
	if !strings.Contains(text.String(), "onceflight.commands: group") {
		t.Errorf("the violation does not name its topic alone:\n%s", text.String())
	}
}
