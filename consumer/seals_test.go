package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/checkpointcheck"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

type execKey struct {
	signer *trustlog.Signer
	line   string // trusted-keys line
}

func newExecKey(t testing.TB, name string) execKey {
	t.Helper()
	skey, vkey, err := trustlog.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := trustlog.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return execKey{s, vkey}
}

func trustedKeys(t testing.TB, lines ...string) *trust.TrustedKeys {
	t.Helper()
	tk, err := trust.ParseTrustedKeys("trusted-keys", []byte(strings.Join(lines, "\n")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func signing(k execKey, tk *trust.TrustedKeys) []consumer.Option {
	return []consumer.Option{consumer.WithSignedJournal(consumer.SignedJournal{Signer: k.signer, Trusted: tk, Require: true})}
}

// forge appends to the journal, outside any executor, a record that
// chains correctly after the partition's last one: key "forged" of entity
// e succeeded — a refund that never ran.
func forge(t *testing.T, h *onceflighttest.Harness, e string) int32 {
	t.Helper()
	p := partitioner.ForEntity(e, onceflighttest.Partitions)
	fp, _ := schemas.Fingerprint("noop.ping", e, []byte(`{}`))
	now := time.Now().UTC()
	kafkatest.AppendChained(t, h.Brokers, "onceflight.journal", p, h.Journal(p), schemas.Record{
		IdempotencyKey: "forged", Entity: e, Action: "noop.ping", Status: schemas.StatusSucceeded,
		Fingerprint: fp, Attempts: 1, StartedAt: &now, FinishedAt: &now})
	return p
}

func heldOnly(t *testing.T, n *onceflighttest.Node, p int32, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(n.Ex.NotReady(), fmt.Sprintf("partition %d held", p)) {
		if time.Now().After(deadline) {
			t.Fatalf("partition %d not held; readiness: %q", p, n.Ex.NotReady())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := n.Ex.NotReady(); !strings.Contains(r, want) {
		t.Fatalf("held for %q, want %q", r, want)
	}
}

// A record appended by a writer without an executor key, with a correct
// hash chain, is refused by restore (an executor on an empty data dir) and
// by takeover (another executor): its partition is held, its key is never
// answered from it; the audit names it. Revoked and expired keys likewise.
func TestUnsignedJournalRecordRefused(t *testing.T) {
	h := onceflighttest.New(t)
	a, b := newExecKey(t, "executor-a"), newExecKey(t, "executor-b")
	both := trustedKeys(t, a.line, b.line)
	na := h.StartNode("a", t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: signing(a, both)})
	for i := range 9 {
		h.Submit(fmt.Sprintf("c%d", i), fmt.Sprintf("order-%d", i%3), fmt.Sprintf("k%d", i), `{}`)
	}
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(9, seen, nil)
	// Signed journals restore: a second executor takes over cleanly.
	if err := na.Stop(); err != nil {
		t.Fatal(err)
	}
	dirB := t.TempDir()
	nb := h.StartNode("b", dirB, onceflighttest.NodeOptions{ExecutorOpts: signing(b, both)})
	onceflighttest.WaitFor(t, 30*time.Second, "b ready", func() bool { return nb.Owns(onceflighttest.Partitions) })
	h.Submit("c9", "order-0", "k9", `{}`)
	h.Outcomes(10, seen, nil)
	if err := nb.Stop(); err != nil {
		t.Fatal(err)
	}
	h.Audit() // the guarantee checks read past the seals
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The guarantee audit with the trusted keys: every record is sealed.
	grep, err := audit.Run(ctx, audit.Options{Client: cl, Trusted: both, MaxViolations: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !grep.OK() || !slices.ContainsFunc(grep.Checks, func(c audit.CheckResult) bool { return c.Name == audit.CheckJournalSigned && c.OK }) {
		t.Fatalf("audit of a signed journal: %+v", grep.Checks)
	}

	p := forge(t, h, "order-0")
	// The executor that wrote the partition, restarted on its own data
	// dir: its catch-up from its saved position meets the record.
	nb = h.StartNode("b2", dirB, onceflighttest.NodeOptions{ExecutorOpts: signing(b, both)})
	heldOnly(t, nb, p, "not covered by a trusted executor signature")
	if err := nb.Stop(); err != nil {
		t.Fatal(err)
	}
	// Takeover by another executor (fresh data dir: restore from the journal).
	nc := h.StartNode("c", t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: signing(a, both)})
	heldOnly(t, nc, p, "not covered by a trusted executor signature")
	// The forged key is not answered from the forged record: its
	// partition is held, so the command waits; others are answered.
	h.Submit("forged-cmd", "order-0", "forged", `{}`)
	other := "order-1"
	if partitioner.ForEntity(other, onceflighttest.Partitions) == p {
		other = "order-2"
	}
	h.Submit("c10", other, "k10", `{}`)
	h.Outcomes(11, seen, nil)
	if _, ok := seen["forged-cmd"]; ok {
		t.Fatalf("the forged key was answered: %+v", seen["forged-cmd"])
	}
	if n := h.EffectsOf("order-0", "forged"); n != 0 {
		t.Fatalf("forged key executed %d times", n)
	}
	if err := nc.Stop(); err != nil {
		t.Fatal(err)
	}

	// The audits name it: the guarantee audit with the trusted keys,
	// and audit verify --require-signed.
	grep, err = audit.Run(ctx, audit.Options{Client: cl, Trusted: both, MaxViolations: 10})
	if err != nil {
		t.Fatal(err)
	}
	var named bool
	for _, c := range grep.Checks {
		for _, v := range c.Violations {
			named = named || c.Name == audit.CheckJournalSigned && v.Partition == p && strings.Contains(v.Message, "not covered by a trusted executor signature")
		}
	}
	if grep.OK() || !named {
		t.Fatalf("guarantee audit of a forged record: %+v", grep.Checks)
	}
	rep, err := checkpointcheck.Verify(ctx, checkpointcheck.Options{Client: cl, Trusted: both, RequireSigned: true})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	_ = rep.WriteText(&text)
	if rep.OK() || !strings.Contains(text.String(), fmt.Sprintf("partition %d:", p)) || !strings.Contains(text.String(), "not covered by a trusted executor signature") {
		t.Fatalf("audit of a forged record:\n%s", text.String())
	}
	for _, v := range rep.Partitions {
		if v.Partition != p && len(v.Problems) > 0 {
			t.Fatalf("signed partition %d fails:\n%s", v.Partition, text.String())
		}
	}

	// Keys revoked or expired: their records are refused the same way.
	for name, tk := range map[string]*trust.TrustedKeys{
		"revoked": trustedKeys(t, a.line+" revoked", b.line+" revoked"),
		"expired": trustedKeys(t, a.line+" not_after=2020-01-01T00:00:00Z", b.line+" not_after=2020-01-01T00:00:00Z"),
	} {
		n := h.StartNode("d-"+name, t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: signing(b, tk)})
		// Every partition: each holds records signed by a and b only.
		onceflighttest.WaitFor(t, 30*time.Second, "partitions held for "+name, func() bool {
			return strings.Contains(n.Ex.NotReady(), name) && len(n.Ex.Owned()) == 0
		})
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// An executor told to require signed records but given no key refuses to
// start.
func TestRequireSignedWithoutKey(t *testing.T) {
	h := onceflighttest.New(t)
	n := h.StartNode("x", t.TempDir(), onceflighttest.NodeOptions{ExecutorOpts: []consumer.Option{
		consumer.WithSignedJournal(consumer.SignedJournal{Require: true, Trusted: trustedKeys(t, newExecKey(t, "a").line)}),
	}})
	select {
	case err := <-n.Done:
		n.Done <- err
		if err == nil || !strings.Contains(err.Error(), "no signing key") {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an executor without its signing key started")
	}
}

// With checkpoints and signed transactions on, Run still leaves nothing
// running: the checkpoint loop, the tree rebuilds and the last publish end
// before it returns.
func TestRunLeavesNothingRunningSigned(t *testing.T) {
	h := onceflighttest.New(t)
	k := newExecKey(t, "executor-a")
	tk := trustedKeys(t, k.line)
	h.Opts = append(signing(k, tk), consumer.WithCheckpoints(consumer.CheckpointConfig{Signer: k.signer, Trusted: tk, Interval: 20 * time.Millisecond}))
	before := goleak.IgnoreCurrent()
	dir := t.TempDir()
	for i := range 3 {
		h.Start(dir)
		answerOne(t, h.Brokers, fmt.Sprintf("c%d", i))
		h.Stop()
		if err := goleak.Find(append(brokerSide, before)...); err != nil {
			t.Fatalf("round %d: goroutines left after Run returned:\n%v", i, err)
		}
	}
}

// Retention that cuts a signed transaction (DeleteRecords standing in
// for it, up to the transaction's seal) leaves a journal whose first seal
// covers a record that is gone. Once the gap is accepted, restore passes
// over that transaction's remains instead of holding the partition, and
// still checks every seal after it.
func TestSignedJournalAfterRetentionCut(t *testing.T) {
	h := onceflighttest.New(t)
	k := newExecKey(t, "executor-a")
	tk := trustedKeys(t, k.line)
	h.Opts = signing(k, tk)
	h.Start(t.TempDir())
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Submit("c2", "order-1", "k2", `{}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	h.Stop()
	p := partitioner.ForEntity("order-1", onceflighttest.Partitions)
	var cut int64 = -1
	afterK1 := false
	for _, r := range h.Journal(p) {
		switch {
		case wire.JournalKind(r) == schemas.KindRecord && string(r.Key) == "k1":
			afterK1 = true
		case afterK1 && wire.JournalKind(r) == schemas.KindSeal && cut < 0:
			cut = r.Offset // k1's transaction's seal: its records go, it stays
		}
	}
	if cut < 0 {
		t.Fatal("no seal after k1's record")
	}
	deleteJournal(t, h, p, cut)

	h.Tune = func(c *consumer.Config) { c.AcceptJournalGap = true }
	h.Start(t.TempDir())
	h.Submit("c3", "order-1", "k2", `{}`) // k2's transaction was kept whole
	until(h, seen, func() bool { return len(seen["c3"]) > 0 })
	if o := seen["c3"][0]; !o.Replayed {
		t.Fatalf("k2 again after the cut: %s replayed=%v, want a replay of its signed record", o.Record.Status, o.Replayed)
	}
	h.Stop()
}

// TestCopiedTransactionRefusedAfterRestart: a copy of an earlier signed
// transaction of the executor's, appended to the journal while it was
// stopped, is refused by its restart from its own data dir: the restore's
// seal gate goes on after the last seal the executor committed
// (dedupe.Progress.SealNote), as a reader that never stopped would. A
// fresh gate took the copy's seal as the first of a chain and put the
// key's older record back. A restart without a copy still goes on with
// the executor's own chain.
func TestCopiedTransactionRefusedAfterRestart(t *testing.T) {
	h := onceflighttest.New(t)
	k := newExecKey(t, "executor-a")
	opts := onceflighttest.NodeOptions{ExecutorOpts: signing(k, trustedKeys(t, k.line))}
	dir := t.TempDir()
	seen := map[string][]schemas.Outcome{}
	n := h.StartNode("a", dir, opts)
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Outcomes(1, seen, nil)
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	n = h.StartNode("a2", dir, opts)
	h.Submit("c2", "order-1", "k2", `{}`)
	h.Outcomes(2, seen, nil)
	if r := n.Ex.NotReady(); r != "" {
		t.Fatalf("restart without a copy: %s", r)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}

	p := partitioner.ForEntity("order-1", onceflighttest.Partitions)
	var txn, cur []*kgo.Record
	for _, r := range h.Journal(p) {
		if r.Attrs.IsControl() {
			cur = nil
			continue
		}
		cur = append(cur, r)
		if wire.JournalKind(r) != schemas.KindSeal {
			continue
		}
		if txn == nil && slices.ContainsFunc(cur, func(r *kgo.Record) bool { return string(r.Key) == "k1" }) {
			txn = cur
		}
		cur = nil
	}
	if txn == nil {
		t.Fatal("no sealed transaction holds k1")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range txn {
		c := &kgo.Record{Topic: r.Topic, Partition: p, Key: r.Key, Value: r.Value, Headers: r.Headers}
		if err := cl.ProduceSync(ctx, c).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	n = h.StartNode("a3", dir, opts)
	heldOnly(t, n, p, "not covered by a trusted executor signature")
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
}
