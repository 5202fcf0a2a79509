package consumer_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/internal/apifake"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// evidenceService is the fake external system (apifake.Effects) whose
// behaviour is chosen per idempotency key by its prefix:
//
//	fast-     POST 201
//	retry-    POST 503 (not done) once, then 201
//	slow-     POST applies, then answers after the attempt's timeout; GET finds it
//	lost-     first POST times out without applying (GET 404), the next one 201
//	crash-    POST applies and times out; GET hangs until release is closed
type evidenceService struct {
	*apifake.Effects
	release chan struct{}
}

func newEvidenceService(t *testing.T) *evidenceService {
	s := &evidenceService{release: make(chan struct{})}
	s.Effects = apifake.NewEffects(t, apifake.WithScript(func(key string, n int) apifake.Fault {
		switch {
		case strings.HasPrefix(key, "retry-") && n == 1:
			return apifake.Fault{Before: true, Status: http.StatusServiceUnavailable, Body: "busy", ContentType: "text/plain"}
		case strings.HasPrefix(key, "lost-") && n == 1:
			return apifake.Fault{Before: true, Hang: true}
		case strings.HasPrefix(key, "slow-"), strings.HasPrefix(key, "crash-"):
			return apifake.HangAfterEffect // answered after the client gave up: ambiguous
		}
		return apifake.None
	}), apifake.WithConfirmScript(func(key string, _ int, _ bool) apifake.Fault {
		if strings.HasPrefix(key, "crash-") {
			<-s.release
		}
		return apifake.None
	}))
	t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
	})
	return s
}

func (s *evidenceService) postsOf(key string) int {
	posts, _, _ := s.Counts(key)
	return len(posts)
}

const evidenceYAML = `actions:
  payments.refund:
    connector: http
    url: %[1]s
    confirm_url: %[1]s/{key}
    timeout: 300ms
    confirm_timeout: 5s
`

// kinds is the record's evidence as "attempt N answer" / "confirm by answer".
func kinds(rec schemas.Record) []string {
	var out []string
	for _, ev := range rec.Evidence {
		if ev.Kind == schemas.EvidenceConfirm {
			out = append(out, "confirm "+ev.By+" "+ev.Answer)
			continue
		}
		out = append(out, fmt.Sprintf("attempt %d %s", ev.Attempt, ev.Answer))
	}
	return out
}

func wantEvidence(t *testing.T, rec schemas.Record, status schemas.Status, by string, steps []string, text ...string) {
	t.Helper()
	if rec.Status != status || rec.EstablishedBy != by || fmt.Sprint(kinds(rec)) != fmt.Sprint(steps) {
		t.Errorf("%s: %s established by %q, evidence %v; want %s by %q, %v", rec.IdempotencyKey, rec.Status, rec.EstablishedBy, kinds(rec), status, by, steps)
	}
	for i, ev := range rec.Evidence {
		if ev.At.IsZero() || ev.EndedAt == nil || ev.EndedAt.Before(ev.At) || (ev.Kind == schemas.EvidenceAttempt && ev.FencingToken == 0) {
			t.Errorf("%s: evidence %d lacks its times or fencing token: %+v", rec.IdempotencyKey, i, ev)
		}
	}
	got := wire.EvidenceText(&rec)
	for _, w := range text {
		if !strings.Contains(got, w) {
			t.Errorf("%s: explain's evidence %q lacks %q", rec.IdempotencyKey, got, w)
		}
	}
}

// TestEvidencePaths: each way an outcome is established leaves its story in
// the record (docs/events.md#evidence), and audit's evidence check holds
// on the real journal.
func TestEvidencePaths(t *testing.T) {
	h := onceflighttest.New(t)
	svc := newEvidenceService(t)
	h.UseConfig(fmt.Sprintf(evidenceYAML, svc.URL("")))
	reg := prometheus.NewRegistry()
	h.Reg = reg
	h.Start(t.TempDir())
	for i, key := range []string{"fast-1", "retry-1", "slow-1", "lost-1"} {
		h.SubmitAction("c-"+key, "payments.refund", fmt.Sprintf("order-%d", i), key, `{"amount":1}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(4, seen, nil)
	rec := func(key string) schemas.Record { return seen["c-"+key][0].Record }

	wantEvidence(t, rec("fast-1"), schemas.StatusSucceeded, schemas.EstablishedByAnswer,
		[]string{"attempt 1 succeeded"}, "attempt 1 → succeeded → succeeded, established by answer")
	wantEvidence(t, rec("retry-1"), schemas.StatusSucceeded, schemas.EstablishedByAnswer,
		[]string{"attempt 1 unavailable", "attempt 2 succeeded"}, "attempt 1 → unavailable (HTTP 503", "attempt 2 → succeeded → succeeded, established by answer")
	wantEvidence(t, rec("slow-1"), schemas.StatusSucceeded, schemas.EstablishedByConfirmation,
		[]string{"attempt 1 ambiguous", "confirm executor found"}, "attempt 1 → ambiguous (after ", "sent, no response", "→ confirm asked by executor → found → succeeded, established by confirmation")
	wantEvidence(t, rec("lost-1"), schemas.StatusSucceeded, schemas.EstablishedByAnswer,
		[]string{"attempt 1 ambiguous", "confirm executor not_found", "attempt 2 succeeded"},
		"attempt 1 → ambiguous", "confirm asked by executor → not found", "attempt 2 → succeeded → succeeded, established by answer")
	for key, want := range map[string]int{"fast-1": 1, "retry-1": 2, "slow-1": 1, "lost-1": 2} {
		if n := svc.postsOf(key); n != want {
			t.Errorf("%s: %d POSTs, want %d", key, n, want)
		}
	}
	// Successes by how they were established: three answers, one
	// confirmation, none by the reconciler or an operator (yet: the
	// series exist from the start).
	for by, want := range map[string]float64{schemas.EstablishedByAnswer: 3, schemas.EstablishedByConfirmation: 1,
		schemas.EstablishedByReconciler: 0, schemas.EstablishedByOperator: 0} {
		if got, ok := kafkatest.Gauge(t, reg, "onceflight_outcomes_established_total", "status", "succeeded", "established_by", by); !ok || got != want {
			t.Errorf("onceflight_outcomes_established_total{status=\"succeeded\",established_by=%q} = %v (%v), want %v", by, got, ok, want)
		}
	}
	if got, ok := kafkatest.Gauge(t, reg, "onceflight_outcomes_established_total", "status", "unresolved", "established_by", schemas.EstablishedByConfirmation); !ok || got != 0 {
		t.Errorf("unresolved by confirmation = %v (%v), want 0", got, ok)
	}
	// The ambiguous answer was journaled before its confirmation.
	pending := 0
	for _, r := range h.JournalAll() {
		if r.IdempotencyKey == "slow-1" && r.Status == schemas.StatusInProgress && r.Error != nil && r.Error.Code == schemas.CodeConfirmationPending {
			pending++
			if fmt.Sprint(kinds(r)) != "[attempt 1 ambiguous]" || !strings.HasSuffix(wire.EvidenceText(&r), "→ confirmation pending") {
				t.Errorf("pending record: %v %q", kinds(r), wire.EvidenceText(&r))
			}
		}
	}
	if pending != 1 {
		t.Errorf("slow-1: %d confirmation_pending records, want 1", pending)
	}
	h.Audit()
}

// TestEvidenceCrashBeforeConfirmation: the executor stops after the
// ambiguous answer while the confirmation is out. The journal says
// "ambiguous, confirmation pending"; the next owner confirms (never a
// second POST) and the record says it was established by confirmation.
func TestEvidenceCrashBeforeConfirmation(t *testing.T) {
	t.Parallel() // waits out timeouts and sessions, mostly idle: beside the others of its kind (make test stays short)
	h := onceflighttest.New(t)
	svc := newEvidenceService(t)
	// confirm_timeout beyond the graceful stop's 5s bound: the stop
	// abandons the confirmation, as a crash would.
	h.UseConfig(strings.Replace(fmt.Sprintf(evidenceYAML, svc.URL("")), "confirm_timeout: 5s", "confirm_timeout: 60s", 1))
	dir := t.TempDir()
	h.Start(dir)
	h.SubmitAction("c-crash", "payments.refund", "order-c", "crash-1", `{"amount":1}`)
	var last schemas.Record
	onceflighttest.WaitFor(t, 30*time.Second, "confirmation_pending record", func() bool {
		for _, r := range h.JournalAll() {
			if r.IdempotencyKey == "crash-1" {
				last = r
			}
		}
		return last.Error != nil && last.Error.Code == schemas.CodeConfirmationPending
	})
	h.Stop()
	if last.Status != schemas.StatusInProgress || fmt.Sprint(kinds(last)) != "[attempt 1 ambiguous]" ||
		!strings.HasPrefix(wire.EvidenceText(&last), "attempt 1 → ambiguous (after ") || !strings.HasSuffix(wire.EvidenceText(&last), "→ confirmation pending") {
		t.Fatalf("record left by the stopped owner: %s %v %q", last.Status, kinds(last), wire.EvidenceText(&last))
	}
	close(svc.release)
	h.Start(dir)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(1, seen, nil)
	wantEvidence(t, seen["c-crash"][0].Record, schemas.StatusSucceeded, schemas.EstablishedByConfirmation,
		[]string{"attempt 1 ambiguous", "confirm executor found"}, "attempt 1 → ambiguous", "confirm asked by executor → found → succeeded, established by confirmation")
	if n := svc.postsOf("crash-1"); n != 1 {
		t.Errorf("crash-1: %d POSTs, want 1", n)
	}
	h.Audit()
}

// auditWithKeys audits h's topics with the control keys ks, so that the
// evidence check matches every record established by an operator with its
// signed decision; it fails t unless every check holds.
func auditWithKeys(t *testing.T, h *onceflighttest.Harness, ks *schemas.ControlKeys) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rep, err := audit.Run(ctx, audit.Options{Client: cl, ControlKeys: ks})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Fatalf("audit with the control keys:\n%s", b.String())
	}
}
