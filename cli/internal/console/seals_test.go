package console

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// appendUnsigned writes to the journal, as a writer without an executor
// key would, a record of key for entity claiming status st, chained
// correctly after the partition's last record (the hash chain alone
// cannot tell it from the executor's).
func appendUnsigned(t *testing.T, h *onceflighttest.Harness, entity, key string, st schemas.Status) {
	t.Helper()
	p := partitioner.ForEntity(entity, onceflighttest.Partitions)
	fp, _ := schemas.Fingerprint("noop.ping", entity, []byte(`{}`))
	now := time.Now().UTC()
	kafkatest.AppendChained(t, h.Brokers, schemas.DefaultTopics().Journal, p, h.Journal(p), schemas.Record{
		IdempotencyKey: key, Entity: entity, Action: "noop.ping", Status: st, Fingerprint: fp, Attempts: 2, StartedAt: &now,
		Error: &schemas.Error{Code: "timeout", Message: "forged: no answer"}})
}

// runProjection runs a projection with opts until stop (or the test's
// end).
// WithStatsInterval refreshes lag, owners and the command rate every d
// instead of every 2s, so that tests see them soon.
func WithStatsInterval(d time.Duration) ProjectionOption { return func(p *Projection) { p.every = d } }

func runProjection(t testing.TB, dir string, brokers []string, opts ...ProjectionOption) (*Projection, func()) {
	t.Helper()
	opts = append([]ProjectionOption{WithStatsInterval(200 * time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})))}, opts...)
	p, err := OpenProjection(dir, brokers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projection: %v", err)
		}
		_ = p.Close()
	}
	t.Cleanup(stop)
	return p, stop
}

// TestConsoleRefusesUnsignedJournalRecords: an executor signs its journal;
// a writer without its key appends records with a correct hash chain — a
// new key claiming unresolved and an old, succeeded key claiming
// unresolved again. A console without trusted keys believes them (the
// forged key waits for a decision) and says it does not check; one with
// them marks them UNSIGNED, shows the signed state, keeps them out of
// Needs a decision and the overview's counts, refuses decisions on them,
// goes on with the executor's later transactions, and keeps all that over
// a restart.
func TestConsoleRefusesUnsignedJournalRecords(t *testing.T) {
	h := onceflighttest.New(t)
	signer := testSigner(t, "executor-a")
	tk := trusting(t, signer.VerifierKey())
	h.StartNode("a", t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: []consumer.Option{
		consumer.WithSignedJournal(consumer.SignedJournal{Signer: signer, Trusted: tk})}})
	const ent = "order-7"
	h.Submit("c1", ent, "paid", `{}`)
	h.Submit("c2", "order-8", "other", `{}`)
	h.Outcomes(2, map[string][]schemas.Outcome{}, nil)

	dirC := t.TempDir()
	checked, stopChecked := runProjection(t, dirC, h.Brokers, WithTrustedKeys(tk, ""))
	plain, _ := runProjection(t, t.TempDir(), h.Brokers)
	waitExec(t, checked, ent, "paid", schemas.StatusSucceeded)
	waitExec(t, plain, ent, "paid", schemas.StatusSucceeded)
	// Trusting another key, nothing of this executor is believed.
	otk := trusting(t, testSigner(t, "executor-other").VerifierKey())
	stranger, _ := runProjection(t, t.TempDir(), h.Brokers, WithTrustedKeys(otk, ""))
	onceflighttest.WaitFor(t, 30*time.Second, "a console trusting another key refusing the executor's records", func() bool {
		v, err := stranger.Get(ent, "paid")
		return err == nil && len(v.Unsigned) > 0 && strings.Contains(v.Unsigned[0].Why, "not trusted")
	})
	// (Its status then comes from the outcome event, as for a key whose
	// journal records retention deleted.)
	if v, _ := stranger.Get(ent, "paid"); v.Exec.Journal || v.Exec.Partition != -1 {
		t.Fatalf("a console trusting another key believes a journal record: %+v", v.Exec)
	}
	if got := checked.Checking(); got != "checked" {
		t.Fatalf("Checking with trusted keys = %q", got)
	}
	onceflighttest.WaitFor(t, 10*time.Second, "the plain console noticing the seals", func() bool { return plain.Checking() == "unchecked" })

	// The forged records, last on their partition: no seal follows them.
	appendUnsigned(t, h, ent, "forged", schemas.StatusUnresolved)
	appendUnsigned(t, h, ent, "paid", schemas.StatusUnresolved)
	// Without trusted keys the console believes them.
	waitExec(t, plain, ent, "forged", schemas.StatusUnresolved)
	waitExec(t, plain, ent, "paid", schemas.StatusUnresolved)
	if ws, err := plain.WaitingSummary(); err != nil || ws.Unresolved != 2 {
		t.Fatalf("plain console's unresolved count: %+v %v (the forged records should show: this test proves the check)", ws, err)
	}
	// With them, the records wait aside as pending.
	onceflighttest.WaitFor(t, 30*time.Second, "the forged records shown as pending", func() bool {
		v, err := checked.Get(ent, "forged")
		return err == nil && len(v.Unsigned) == 1 && v.Unsigned[0].Pending
	})

	// The executor goes on: its next transaction on the partition follows
	// the forged records, which no seal then covers for good.
	h.Submit("c3", ent, "after", `{}`)
	h.Outcomes(1, map[string][]schemas.Outcome{}, nil)
	waitExec(t, checked, ent, "after", schemas.StatusSucceeded)

	check := func(p *Projection) {
		t.Helper()
		v, err := p.Get(ent, "forged")
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Unsigned) != 1 || v.Unsigned[0].Pending || v.Unsigned[0].Record.Status != schemas.StatusUnresolved ||
			!strings.Contains(v.Unsigned[0].Why, "no seal covers them") {
			t.Fatalf("forged key's unsigned records: %+v", v.Unsigned)
		}
		if v.Exec.Status != "" || v.Exec.Journal || len(v.Steps) != 0 {
			t.Fatalf("forged key has a state: %+v %+v", v.Exec, v.Steps)
		}
		v, err = p.Get(ent, "paid")
		if err != nil {
			t.Fatal(err)
		}
		if v.Exec.Status != schemas.StatusSucceeded || len(v.Unsigned) != 1 {
			t.Fatalf("paid: %s with %d unsigned records, want the signed succeeded and 1", v.Exec.Status, len(v.Unsigned))
		}
		ws, err := p.WaitingSummary()
		if err != nil || ws.Unresolved != 0 || ws.Held != 0 {
			t.Fatalf("overview counts %+v %v: the forged records count", ws, err)
		}
		waiting, err := p.Waiting(Filter{}, 100)
		if err != nil || len(waiting) != 0 {
			t.Fatalf("needs a decision: %+v %v", waiting, err)
		}
		if n, err := p.UnsignedCount(100); err != nil || n != 2 {
			t.Fatalf("unsigned count %d %v, want 2", n, err)
		}
	}
	check(checked)

	// The pages.
	key, err := schemas.NewControlKey("test")
	if err != nil {
		t.Fatal(err)
	}
	oc, err := client.New(client.WithBrokers(h.Brokers...), client.WithControlKeys(&schemas.ControlKeys{Keys: []schemas.ControlKey{key}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(oc.Close)
	auth, err := httpauth.New(httpauth.WithTokens(httpauth.Token{Name: "alice", Role: httpauth.RoleOperator, Value: operatorToken}))
	if err != nil {
		t.Fatal(err)
	}
	acts, err := inspect.Describe(h.Config, 0)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(p *Projection) *browser {
		s, err := New(Config{Projection: p, Auth: auth, Actions: acts, Decider: ClientDecider{C: oc},
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s)
		t.Cleanup(hs.Close)
		return login(t, hs.URL, operatorToken)
	}
	op := serve(checked)
	xf, xp := execURL(ent, "forged"), execURL(ent, "paid")
	code, body := op.do(http.MethodGet, xf, nil)
	for _, w := range []string{"UNSIGNED journal records", "No trusted record", "no seal covers them", "unsigned-count"} {
		if code != http.StatusOK || !strings.Contains(body, w) {
			t.Fatalf("forged key's page (%d) lacks %q:\n%s", code, w, body)
		}
	}
	if strings.Contains(body, "/decide/") {
		t.Fatalf("forged key's page offers decisions:\n%s", body)
	}
	code, body = op.do(http.MethodGet, xp, nil)
	if code != http.StatusOK || !strings.Contains(body, `<span id="exec-status" hidden>succeeded</span>`) || !strings.Contains(body, "UNSIGNED journal records") ||
		strings.Contains(body, "/decide/") {
		t.Fatalf("paid's page (%d) should show succeeded, the UNSIGNED record and no decision:\n%s", code, body)
	}
	_, body = op.do(http.MethodGet, "/decide", nil)
	if strings.Contains(body, "forged") {
		t.Fatalf("needs a decision lists the forged key:\n%s", body)
	}
	for _, c := range []struct{ url, kind string }{{xf, "resolve-succeeded"}, {xp, "release"}} {
		code, body = op.do(http.MethodPost, c.url+"/decide/"+c.kind, url.Values{"csrf": {op.csrf(c.url)}, "reason": {"checked"}, "confirm": {"yes"}})
		if code != http.StatusConflict || !strings.Contains(body, "UNSIGNED journal records") || !strings.Contains(body, "Nothing was sent") {
			t.Fatalf("%s on %s: %d, want 409 naming the UNSIGNED records:\n%s", c.kind, c.url, code, body)
		}
		code, _ = op.do(http.MethodGet, c.url+"/decide/"+c.kind, nil)
		if code != http.StatusConflict {
			t.Fatalf("%s form on %s: %d, want 409", c.kind, c.url, code)
		}
	}
	_, body = serve(plain).do(http.MethodGet, xf, nil)
	if !strings.Contains(body, "seals-unchecked") || strings.Contains(body, "UNSIGNED journal records") {
		t.Fatalf("the plain console should say it does not check the seals:\n%s", body)
	}

	// A restart reads nothing it judged again and forgets nothing.
	stopChecked()
	checked, _ = runProjection(t, dirC, h.Brokers, WithTrustedKeys(tk, ""))
	h.Submit("c4", ent, "later", `{}`)
	h.Outcomes(1, map[string][]schemas.Outcome{}, nil)
	waitExec(t, checked, ent, "later", schemas.StatusSucceeded)
	check(checked)
}

// BenchmarkProjectionCatchUpSigned: a signing executor writes n noop
// commands; a new console indexes its topics from the start without and
// with seal checking. Reports plain and checked entries/s and their
// ratio (checked/plain: 1 means checking costs nothing).
func BenchmarkProjectionCatchUpSigned(b *testing.B) {
	const n = 4000
	for range b.N {
		h := onceflighttest.New(b)
		signer := testSigner(b, "executor-a")
		tk := trusting(b, signer.VerifierKey())
		h.Opts = []consumer.Option{consumer.WithSignedJournal(consumer.SignedJournal{Signer: signer, Trusted: tk})}
		h.Tune = func(c *consumer.Config) {
			c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		}
		h.Start(b.TempDir())
		for i := range n {
			h.Submit(strconv.Itoa(i), "e-"+strconv.Itoa(i%500), "k-"+strconv.Itoa(i), `{}`)
		}
		h.Outcomes(n, map[string][]schemas.Outcome{}, nil)
		// How many entries the topics hold: a first console, read to
		// the end.
		p0, stop0 := runProjection(b, b.TempDir(), h.Brokers)
		onceflighttest.WaitFor(b, 2*time.Minute, "a console caught up", func() bool { return caughtUp(p0) })
		want := p0.Applied()
		stop0()
		rate := func(opts ...ProjectionOption) float64 {
			p, stop := runProjection(b, b.TempDir(), h.Brokers, opts...)
			defer stop()
			t0 := time.Now()
			onceflighttest.WaitFor(b, 2*time.Minute, "a console's catch-up", func() bool { return p.Applied() >= want })
			return float64(want) / time.Since(t0).Seconds()
		}
		plain := rate()
		checked := rate(WithTrustedKeys(tk, ""))
		b.ReportMetric(plain, "plain_entries/s")
		b.ReportMetric(checked, "checked_entries/s")
		b.ReportMetric(checked/plain, "checked/plain")
		h.Stop()
	}
}

// caughtUp: every partition's lag is 0 after a stats refresh.
func caughtUp(p *Projection) bool {
	s := p.Stats()
	if s.At.IsZero() || len(s.Partitions) == 0 {
		return false
	}
	for _, ps := range s.Partitions {
		if ps.Lag > 0 {
			return false
		}
	}
	return true
}
