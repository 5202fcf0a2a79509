package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// One real executor against kfake over TCP (package onceflighttest), with a
// noop action; commands are produced with a manual partitioner, so that
// tests choose partitions (a misrouted command is one on another's).

const nParts = onceflighttest.Partitions

type harness struct {
	*onceflighttest.Harness
	t  *testing.T
	cl *kgo.Client // producer with a manual partitioner
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{Harness: onceflighttest.New(t), t: t}
	h.UseConfig("actions:\n  noop.ping:\n    connector: noop\n    timeout: 500ms\n")
	var err error
	h.cl, err = kgo.NewClient(kgo.SeedBrokers(h.Brokers...), kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cl.Close)
	return h
}

// start runs the executor on an empty data dir: after a restart, what it
// knows comes from the journal.
func (h *harness) start() {
	h.t.Helper()
	h.Start(h.t.TempDir())
}

// produce writes r to partition p of its topic (default: the entity's).
func (h *harness) produce(r *kgo.Record) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) submit(id, entity, key, data string, p int32) {
	h.t.Helper()
	r, err := schemas.EncodeCommand(schemas.Command{ID: id, Source: "test", Type: "noop.ping", Subject: entity,
		IdempotencyKey: key, Data: json.RawMessage(data)}, schemas.Binary)
	if err != nil {
		h.t.Fatal(err)
	}
	r.Topic, r.Partition = "onceflight.commands", p
	h.produce(r)
}

func home(entity string) int32 { return partitioner.ForEntity(entity, nParts) }

// auditUntil runs the audit until cond holds (the executor is still
// answering) or 30s pass, and returns the last report.
func auditUntil(t *testing.T, cl *kgo.Client, cond func(audit.Report) bool) audit.Report {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		rep, err := audit.Run(ctx, audit.Options{Client: cl, MaxViolations: 20})
		cancel()
		if err == nil && cond(rep) {
			return rep
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			_ = rep.WriteText(&b)
			t.Fatalf("audit never reached the expected state (err %v):\n%s", err, b.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func TestAuditAgainstExecutor(t *testing.T) {
	h := newHarness(t)
	h.start()

	h.submit("c1", "order-1", "k1", `{"amount":5}`, home("order-1"))
	h.submit("c2", "order-1", "k1", `{"amount":5}`, home("order-1")) // repeat: replayed
	h.submit("c3", "order-1", "k1", `{"amount":6}`, home("order-1")) // reused key: rejected
	h.submit("c4", "order-1", "k4", `{}`, home("order-1"))           // same entity, next key
	h.submit("c5", "order-2", "k5", `{}`, home("order-2"))
	h.submit("c6", "order-3", "k6", `{}`, (home("order-3")+1)%nParts) // misrouted: forwarded
	h.produce(&kgo.Record{Topic: "onceflight.commands", Partition: 0, Value: []byte("not a cloudevent")})
	h.produce(&kgo.Record{Topic: "onceflight.commands", Partition: home("order-2"), Key: []byte("order-2"), Value: []byte("garbage")})

	cl, err := client.New(h.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// 8 records produced + the forwarded copy of c6.
	rep := auditUntil(t, cl, func(r audit.Report) bool { return r.Counts.Commands == 9 && r.Counts.Pending == 0 })
	var text strings.Builder
	_ = rep.WriteText(&text)
	t.Logf("audit of a healthy run:\n%s", text.String())
	if !rep.OK() {
		t.Fatalf("healthy run failed the audit:\n%s", text.String())
	}
	c := rep.Counts
	// c1..c6 answered, plus the rejected outcome of the keyed garbage.
	if c.Outcomes != 7 || c.Deadlettered != 2 || c.Forwarded != 1 || c.Keys != 4 || c.JournalRecords == 0 {
		t.Fatalf("counts %+v", c)
	}
	// A restart writes new epoch markers and hands out tokens of a new
	// epoch; repeats after it are answered from the journal. None of it
	// may look like a violation.
	h.Stop()
	h.start()
	h.submit("c7", "order-1", "k7", `{}`, home("order-1"))
	h.submit("c8", "order-1", "k1", `{"amount":5}`, home("order-1"))
	rep = auditUntil(t, cl, func(r audit.Report) bool { return r.Counts.Commands == 11 && r.Counts.Pending == 0 })
	if text.Reset(); rep.WriteText(&text) == nil && !rep.OK() {
		t.Fatalf("audit after a restart failed:\n%s", text.String())
	}
	h.Stop()

	// Tamper: append a copy of a real final record with a changed result
	// to its own journal partition. k7's is of the current epoch, so only
	// the chain can tell (a copy of an older epoch's record would also be
	// flagged by single_flight as a replaced owner's write).
	var victim *kgo.Record
	err = client.Read(context.Background(), cl, "onceflight.journal", true, false, func(r *kgo.Record) error {
		if k, _ := hdr(r, schemas.HeaderKind); k == schemas.KindRecord && string(r.Key) == "k7" {
			if rec, err := schemas.UnmarshalRecord(r.Value); err == nil && rec.Status == schemas.StatusSucceeded {
				victim = r
			}
		}
		return nil
	})
	if err != nil || victim == nil {
		t.Fatalf("no succeeded journal record to copy (err %v)", err)
	}
	rec, _ := schemas.UnmarshalRecord(victim.Value)
	rec.Result = json.RawMessage(`{"tampered":true}`)
	v, err := wire.MarshalRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	forged := &kgo.Record{Topic: victim.Topic, Partition: victim.Partition, Key: victim.Key, Value: v, Headers: victim.Headers}
	h.produce(forged)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err = audit.Run(ctx, audit.Options{Client: cl, MaxViolations: 20})
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	_ = rep.WriteText(&text)
	t.Logf("audit after tampering:\n%s", text.String())
	for _, ch := range rep.Checks {
		if ch.Name != audit.CheckHashChain {
			if !ch.OK {
				t.Errorf("%s failed, want only the chain to fail", ch.Name)
			}
			continue
		}
		if ch.OK || ch.Count != 1 {
			t.Fatalf("chain check: ok=%v count=%d, want exactly the forged record", ch.OK, ch.Count)
		}
		got := ch.Violations[0]
		if got.Partition != forged.Partition || got.Offset != forged.Offset || got.Key != string(victim.Key) {
			t.Fatalf("violation %v, want partition %d offset %d", got, forged.Partition, forged.Offset)
		}
		if !strings.Contains(got.Message, "prev_hash") || !strings.Contains(got.Message, "changed") {
			t.Errorf("message should report both the broken link and the changed contents: %s", got.Message)
		}
	}
	if rep.OK() {
		t.Fatal("tampered journal passed the audit")
	}
}

func hdr(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// TestRunRejectsUnknownPartition: a partition the topic does not have is
// the caller's mistake, reported as ErrBadPartition rather than an empty
// "ok" audit.
func TestRunRejectsUnknownPartition(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp := schemas.DefaultTopics()
	for _, name := range []string{tp.Commands, tp.Journal, tp.Outcomes, tp.Deadletter} {
		if _, err := kadm.NewClient(h.cl).CreateTopic(ctx, nParts, 1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := client.New(h.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := audit.Run(ctx, audit.Options{Client: cl, Partitions: []int32{nParts}}); !errors.Is(err, audit.ErrBadPartition) {
		t.Fatalf("err = %v, want ErrBadPartition", err)
	}
	rep, err := audit.Run(ctx, audit.Options{Client: cl, Partitions: []int32{1}})
	if err != nil || !rep.OK() || rep.Counts.Commands != 0 {
		t.Fatalf("audit of empty topics: %+v, %v", rep, err)
	}
}
