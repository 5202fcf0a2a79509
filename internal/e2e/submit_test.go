package e2e

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestSubmitWaitReplay submits the same key twice with `onceflight submit
// --wait` (binary, then structured mode): the first outcome is succeeded and
// not replayed, the second the same record replayed; `onceflight status`
// prints that record.
func TestSubmitWaitReplay(t *testing.T) {
	brokers := startBroker(t)
	cfg, effects := noopConfig(t)
	startServe(t, serveOpts{brokers: brokers, config: cfg, executorID: "ex-submit"})

	submit := func(mode string) (outcome, map[string]any) {
		t.Helper()
		stdout, stderr, code := runCLI(t, "submit", "--brokers", brokers, "--action", testAction,
			"--entity", "order-1042", "--key", "refund-1042", "--data", `{"amount":5,"currency":"EUR"}`,
			"--wait", "--timeout", "30s", "--mode", mode)
		if code != 0 {
			t.Fatalf("submit --mode %s: exit %d\nstdout: %s\nstderr: %s", mode, code, stdout, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 1 {
			t.Fatalf("submit printed %d lines, want 1: %q", len(lines), stdout)
		}
		o, err := parseOutcome([]byte(lines[0]))
		if err != nil {
			t.Fatalf("submit output is not an outcome: %v: %q", err, stdout)
		}
		var ev struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(o.Raw, &ev); err != nil {
			t.Fatal(err)
		}
		return o, ev.Data
	}

	first, rec1 := submit("binary")
	if first.Data.Status != "succeeded" || first.Replayed {
		t.Errorf("first submit: status %s replayed %v, want succeeded, false", first.Data.Status, first.Replayed)
	}
	second, rec2 := submit("structured")
	if second.Data.Status != "succeeded" || !second.Replayed {
		t.Errorf("second submit: status %s replayed %v, want succeeded, true", second.Data.Status, second.Replayed)
	}
	if second.CausationID == first.CausationID || second.ID == first.ID {
		t.Errorf("the two submits share command id %s or outcome id %s", first.CausationID, first.ID)
	}
	if !reflect.DeepEqual(rec1, rec2) {
		t.Errorf("replayed record differs from the original:\nfirst:  %v\nsecond: %v", rec1, rec2)
	}

	// The key again with other data: refused key_reused, not a repeat,
	// and the record stays the first command's (G2).
	stdout, stderr, code := runCLI(t, "submit", "--brokers", brokers, "--action", testAction,
		"--entity", "order-1042", "--key", "refund-1042", "--data", `{"amount":500,"currency":"EUR"}`,
		"--wait", "--timeout", "30s")
	reused, err := parseOutcome([]byte(strings.TrimSpace(stdout)))
	if code == 0 || err != nil || reused.Data.Status != "rejected" || reused.errCode() != "idempotency_key_reused" || reused.Replayed {
		t.Errorf("the key reused with other data: exit %d, status %s (%v), stderr %s; want rejected idempotency_key_reused", code, reused.Data.Status, err, stderr)
	}

	stdout, stderr, code = runCLI(t, "status", "--brokers", brokers, "refund-1042")
	if code != 0 {
		t.Fatalf("status: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var status map[string]any
	if err := json.Unmarshal([]byte(stdout), &status); err != nil {
		t.Fatalf("status output is not JSON: %v: %q", err, stdout)
	}
	if !reflect.DeepEqual(status, rec1) {
		t.Errorf("status record differs from the outcome's:\nstatus:  %v\noutcome: %v", status, rec1)
	}
	if n := countEffects(t, effects)["refund-1042"]; n != 1 {
		t.Errorf("refund-1042 executed %d times, want 1", n)
	}

	// An unknown key: status fails.
	if _, _, code := runCLI(t, "status", "--brokers", brokers, "no-such-key"); code == 0 {
		t.Errorf("status of an unknown key exited 0")
	}
	audit(t, brokers, defaultGroup)
}
