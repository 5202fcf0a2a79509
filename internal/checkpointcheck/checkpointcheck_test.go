package checkpointcheck_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/mod/sumdb/note"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/checkpointcheck"
	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// harness is the executor harness with a producer that keeps each
// record's partition, so that a test can rewrite the journal partition by partition.
type harness struct {
	*onceflighttest.Harness
	cl *kgo.Client
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{Harness: onceflighttest.New(t)}
	// No effects file: the journal then holds the records the tampering
	// below edits (alter looks for a "succeeded" in the middle record).
	h.UseConfig("actions:\n  noop.ping:\n    connector: noop\n    timeout: 500ms\n")
	cl, err := client.New(h.Brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	h.cl = cl
	return h
}

// checkpointed runs an executor that signs checkpoints, answers n
// commands and stops cleanly (its last checkpoints cover everything it
// wrote). It returns the trusted keys and the checkpoints an auditor
// saved from the topic.
func checkpointed(t *testing.T, n int) (*harness, *trust.TrustedKeys, [][]byte) {
	h, tk, notes, _ := checkpointedBy(t, n)
	return h, tk, notes
}

// checkpointedBy is checkpointed that also returns the executor's signer.
func checkpointedBy(t *testing.T, n int) (*harness, *trust.TrustedKeys, [][]byte, note.Signer) {
	t.Helper()
	skey, vkey, err := trustlog.GenerateKey("executor-a")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := trustlog.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := trust.ParseTrustedKeys("trusted-keys", []byte(vkey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.Opts = append(h.Opts, consumer.WithCheckpoints(consumer.CheckpointConfig{Signer: signer, Every: 4, Interval: 100 * time.Millisecond}))
	h.Start(t.TempDir())
	for i := range n {
		e := fmt.Sprintf("order-%d", i%5)
		h.Submit(fmt.Sprintf("c%d", i), e, fmt.Sprintf("k%d", i), `{}`)
	}
	h.Outcomes(n, map[string][]schemas.Outcome{}, nil)
	h.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	notes, refused, err := checkpointcheck.SavedCheckpoints(ctx, checkpointcheck.Options{Client: h.cl, Trusted: tk, Topic: consumer.DefaultCheckpointsTopic})
	if err != nil || len(refused) > 0 {
		t.Fatalf("saved checkpoints: %v %v", err, refused)
	}
	return h, tk, notes, signer
}

// copyJournal writes the journal into a new topic, partition by partition,
// with edit applied to partition p's records: what an attacker with admin
// rights does to rewrite history (delete the topic, recreate it edited).
func copyJournal(t *testing.T, h *harness, to string, p int32, edit func([]*kgo.Record) []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(h.cl).CreateTopic(ctx, onceflighttest.Partitions, 1, nil, to); err != nil {
		t.Fatal(err)
	}
	for q := range int32(onceflighttest.Partitions) {
		rs := h.Journal(q)
		if q == p {
			rs = edit(rs)
		}
		for _, r := range rs {
			c := &kgo.Record{Topic: to, Partition: q, Key: r.Key, Value: r.Value, Headers: r.Headers}
			if err := h.cl.ProduceSync(ctx, c).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func busiest(rep checkpointcheck.VerifyReport) int32 {
	best := rep.Partitions[0]
	for _, p := range rep.Partitions {
		if p.Records > best.Records {
			best = p
		}
	}
	return best.Partition
}

func TestVerifyCheckpointsAgainstJournal(t *testing.T) {
	h, tk, notes, signer := checkpointedBy(t, 30)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := checkpointcheck.Options{Client: h.cl, Trusted: tk, Topic: consumer.DefaultCheckpointsTopic}
	rep, err := checkpointcheck.Verify(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	_ = rep.WriteText(&text)
	if !rep.OK() {
		t.Fatalf("untouched journal fails:\n%s", text.String())
	}
	for _, p := range rep.Partitions {
		if p.Records > 0 && p.Largest != p.Records {
			t.Fatalf("partition %d: %d records but the largest checkpoint covers %d: no checkpoint at clean shutdown?\n%s", p.Partition, p.Records, p.Largest, text.String())
		}
	}
	p := busiest(rep)

	// The same saved checkpoints against edited copies of the journal.
	swap := func(rs []*kgo.Record) []*kgo.Record {
		rs = slices.Clone(rs)
		rs[1], rs[2] = rs[2], rs[1]
		return rs
	}
	alter := func(rs []*kgo.Record) []*kgo.Record {
		rs = slices.Clone(rs)
		c := *rs[len(rs)/2]
		c.Value = bytes.Replace(c.Value, []byte(`"succeeded"`), []byte(`"failed"`), 1)
		rs[len(rs)/2] = &c
		return rs
	}
	for _, c := range []struct {
		name string
		edit func([]*kgo.Record) []*kgo.Record
		want string
	}{
		{"identical copy", func(rs []*kgo.Record) []*kgo.Record { return rs }, ""},
		{"deleted", func(rs []*kgo.Record) []*kgo.Record { return slices.Delete(slices.Clone(rs), 3, 4) }, "deleted"},
		{"altered", alter, "do not match"},
		{"reordered", swap, "do not match"},
		{"truncated", func(rs []*kgo.Record) []*kgo.Record { return rs[:len(rs)-1] }, "truncated"},
		{"recreated", func([]*kgo.Record) []*kgo.Record { return nil }, "recreated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := "tampered-" + strings.ReplaceAll(c.name, " ", "-")
			copyJournal(t, h, topic, p, c.edit)
			rep, err := checkpointcheck.Verify(ctx, checkpointcheck.Options{Client: h.cl, Trusted: tk, Journal: topic,
				OriginPrefix: "onceflight/onceflight.journal", Checkpoints: notes})
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			_ = rep.WriteText(&text)
			if c.want == "" {
				if !rep.OK() {
					t.Fatalf("identical copy fails:\n%s", text.String())
				}
				return
			}
			if rep.OK() || !strings.Contains(text.String(), c.want) || !strings.Contains(text.String(), fmt.Sprintf("partition %d:", p)) {
				t.Fatalf("want a failure of partition %d naming %q:\n%s", p, c.want, text.String())
			}
			for _, v := range rep.Partitions {
				if v.Partition != p && len(v.Problems) > 0 {
					t.Fatalf("untouched partition %d fails:\n%s", v.Partition, text.String())
				}
			}
		})
	}

	// A holder of the executor's key rewrites the partition's history and
	// signs a checkpoint of the new one: the auditor's saved checkpoint of
	// the old history is not consistent with it, and Verify names both.
	copyJournal(t, h, "rewritten-and-signed", p, alter)
	var l trustlog.Log
	for _, r := range alter(h.Journal(p)) {
		l.Append(trust.RecordLeafHash(r))
	}
	root, err := l.RootAt(l.Size())
	if err != nil {
		t.Fatal(err)
	}
	cp := trust.Checkpoint{Origin: trust.Origin("onceflight/onceflight.journal", p), Size: l.Size(), Root: root, Time: time.Now()}
	forged, err := cp.Sign(signer)
	if err != nil {
		t.Fatal(err)
	}
	rep, err = checkpointcheck.Verify(ctx, checkpointcheck.Options{Client: h.cl, Trusted: tk, Journal: "rewritten-and-signed",
		OriginPrefix: "onceflight/onceflight.journal", Checkpoints: append(slices.Clone(notes), forged), Partitions: []int32{p}})
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	_ = rep.WriteText(&text)
	if rep.OK() || !strings.Contains(text.String(), "are not consistent: two different histories were signed") {
		t.Fatalf("a rewritten history with a new signed checkpoint:\n%s", text.String())
	}

	// Checkpoints signed by a key nobody trusts are refused, named.
	_, other, _ := trustlog.GenerateKey("executor-b")
	otk, _ := trust.ParseTrustedKeys("other-keys", []byte(other+"\n"))
	rep, err = checkpointcheck.Verify(ctx, checkpointcheck.Options{Client: h.cl, Trusted: otk, Checkpoints: notes[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Refused) != 1 || !strings.Contains(rep.Refused[0], "signed by executor-a") {
		t.Fatalf("untrusted checkpoint: %+v", rep.Refused)
	}
}

// A record proved by Prove verifies offline with nothing but the bundle
// and the public key, and fails once one byte of the record changes.
func TestProveAndCheckOffline(t *testing.T) {
	h, tk, _ := checkpointed(t, 12)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proved, err := checkpointcheck.Prove(ctx, checkpointcheck.Options{Client: h.cl, Trusted: tk, Topic: consumer.DefaultCheckpointsTopic}, "order-3", "k8")
	if err != nil {
		t.Fatal(err)
	}
	if len(proved) == 0 || proved[len(proved)-1].Record.Status != schemas.StatusSucceeded {
		t.Fatalf("proved %d records, want the last succeeded", len(proved))
	}
	for _, p := range proved {
		_, leaf, err := trust.CheckProof(p.Bundle, tk)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(leaf.Value, []byte(`"k8"`)) {
			t.Fatalf("proved leaf %s", leaf.Value)
		}
		i := bytes.Index(p.Bundle, []byte("extra "))
		for _, at := range []int{i + 6 + 40, i + 6 + 200} { // inside the base64 record
			bad := bytes.Clone(p.Bundle)
			bad[at] ^= 'A' ^ 'B'
			if bad[at] == p.Bundle[at] {
				continue
			}
			if _, _, err := trust.CheckProof(bad, tk); err == nil {
				t.Fatalf("a proof with byte %d changed verified", at)
			}
		}
	}
	if _, err := checkpointcheck.Prove(ctx, checkpointcheck.Options{Client: h.cl, Trusted: tk, Topic: consumer.DefaultCheckpointsTopic}, "order-3", "nope"); err == nil {
		t.Fatal("proof of an unknown key")
	}
}

// A second executor with its own key takes the partitions over: it goes
// on from the first one's checkpoints (or the journal), and every
// checkpoint of both verifies against the journal, the last covering it
// all. The journal's first records are deleted before it starts, so it,
// and the audit, can only go on from a checkpoint.
func TestCheckpointsAcrossOwners(t *testing.T) {
	h, tkA, _ := checkpointed(t, 15)
	skey, vkeyB, _ := trustlog.GenerateKey("executor-b")
	signerB, err := trustlog.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	both, err := trust.ParseTrustedKeys("both", []byte(tkA.Keys[0].VKey+"\n"+vkeyB+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Retention deletes the journal's first records (the new owner
	// accepts the gap): the tree can only go on from a checkpoint.
	adm := kadm.NewClient(h.cl)
	del := kadm.Offsets{}
	for p := range int32(onceflighttest.Partitions) {
		del.Add(kadm.Offset{Topic: "onceflight.journal", Partition: p, At: 2})
	}
	if _, err := adm.DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	h.Tune = func(c *consumer.Config) { c.AcceptJournalGap = true }
	h.Opts = []consumer.Option{consumer.WithCheckpoints(consumer.CheckpointConfig{Signer: signerB, Trusted: both, Every: 4, Interval: 100 * time.Millisecond})}
	h.Start(t.TempDir())
	for i := 15; i < 30; i++ {
		e := fmt.Sprintf("order-%d", i%5)
		h.Submit(fmt.Sprintf("c%d", i), e, fmt.Sprintf("k%d", i), `{}`)
	}
	h.Outcomes(15, map[string][]schemas.Outcome{}, nil)
	h.Stop()
	rep, err := checkpointcheck.Verify(ctx, checkpointcheck.Options{Client: h.cl, Trusted: both, Topic: consumer.DefaultCheckpointsTopic})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	_ = rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	if !rep.OK() {
		t.Fatalf("\n%s", text.String())
	}
	for _, p := range rep.Partitions {
		if p.Records > 0 && p.Largest != p.Records {
			t.Fatalf("partition %d: last checkpoint covers %d of %d records\n%s", p.Partition, p.Largest, p.Records, text.String())
		}
	}
	// B's checkpoints were signed by B: the topic has some.
	notes, _, err := checkpointcheck.SavedCheckpoints(ctx, checkpointcheck.Options{Client: h.cl, Trusted: both, Topic: consumer.DefaultCheckpointsTopic})
	if err != nil {
		t.Fatal(err)
	}
	byB := 0
	for _, n := range notes {
		if bytes.Contains(n, []byte("— executor-b ")) {
			byB++
		}
	}
	if byB == 0 {
		t.Fatal("no checkpoint signed by the new owner")
	}
}
