package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestReconcileCmd: an unresolved refund whose confirm endpoint was down
// is confirmed at once by `onceflight reconcile` (the reconciler's own
// round is an hour away); the outcome it prints, and `status`, say the
// status was established by the reconciler on a confirmation the operator
// asked for. A record that is not unresolved is refused with its status.
func TestReconcileCmd(t *testing.T) {
	var healthy atomic.Bool
	svc := apifake.NewEffects(t,
		apifake.WithScript(func(string, int) apifake.Fault {
			return apifake.Fault{Status: http.StatusBadGateway, Body: "gateway lost the answer", ContentType: "text/plain"}
		}),
		apifake.WithConfirmScript(func(string, int, bool) apifake.Fault {
			if !healthy.Load() {
				return apifake.Fault{Status: http.StatusServiceUnavailable, Body: "confirm down", ContentType: "text/plain"}
			}
			return apifake.None
		}))
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`reconcile:
  every: 1h
actions:
  payments.refund:
    connector: http
    url: %[1]s
    confirm_url: %[1]s/{key}
    timeout: 300ms
    confirm_timeout: 600ms
`, svc.URL("")))
	h.Start(t.TempDir())
	addr := h.Brokers[0]
	h.SubmitAction("c1", "payments.refund", "order-5", "refund-5", `{"amount":5}`)
	h.SubmitAction("c2", "payments.refund", "order-6", "refund-6", `{"amount":6}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	for _, c := range []string{"c1", "c2"} {
		if o := seen[c][0]; o.Record.Status != schemas.StatusUnresolved {
			t.Fatalf("%s: want unresolved, got %s %+v", c, o.Record.Status, o.Record.Error)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code, _, errOut := execCLI(ctx, "reconcile", "nope", "--brokers", addr); code != exitError || !strings.Contains(errOut, `no record for key "nope"`) {
		t.Errorf("reconcile of an unknown key: exit %d, stderr %q", code, errOut)
	}

	// While the confirm endpoint is down the confirmation learns nothing:
	// no outcome, exit 4, and the record stays unresolved.
	if code, _, errOut := execCLI(ctx, "reconcile", "refund-6", "--brokers", addr, "--timeout", "3s"); code != exitNoOutcome || !strings.Contains(errOut, `record "refund-6" of entity "order-6" is still unresolved after 3s`) {
		t.Errorf("reconcile while the confirm endpoint is down: exit %d, stderr %q", code, errOut)
	}

	healthy.Store(true)
	code, out, errOut := execCLI(ctx, "reconcile", "refund-5", "--brokers", addr, "--timeout", "30s")
	if code != exitOK || !strings.Contains(out, `"status":"succeeded"`) || !strings.Contains(out, `"established_by":"reconciler"`) ||
		!strings.Contains(out, `"by":"operator"`) || strings.Count(out, "\n") != 1 {
		t.Fatalf("reconcile: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = execCLI(ctx, "status", "refund-5", "--brokers", addr)
	if code != exitOK || !strings.Contains(out, `"established_by":"reconciler"`) || !strings.Contains(out, `"answer":"ambiguous"`) ||
		!strings.Contains(out, `HTTP 502: gateway lost the answer"`) || !strings.Contains(out, `"by":"operator"`) {
		t.Errorf("status after the reconcile: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = execCLI(ctx, "explain", "refund-5", "--brokers", addr)
	if code != exitOK || !strings.Contains(out, "evidence: attempt 1 → ambiguous (after ") ||
		!strings.Contains(out, "→ confirm asked by executor → unknown (no confirmation within 600ms") ||
		!strings.Contains(out, "→ confirm asked by operator → found → succeeded, established by reconciler\n") {
		t.Errorf("explain after the reconcile: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := execCLI(ctx, "reconcile", "refund-5", "--brokers", addr); code != exitError || !strings.Contains(errOut, "is succeeded; only unresolved records can be reconciled") {
		t.Errorf("reconcile of a succeeded record: exit %d, stderr %q", code, errOut)
	}
	if n := svc.Effects("refund-5"); n != 1 {
		t.Errorf("effects %d, want 1", n)
	}
}
