package audit

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// benchTopics builds one partition of the topics `make bench-e2e`'s
// executor and repeats phases leave, with their records' shapes: per key
// a structured noop command with a 200-byte payload, its final journal
// record (chained, with an attempt's evidence) and its outcome; then as
// many repeats, each a command and a replayed outcome of the same record.
func benchTopics(b *testing.B, keys int) (journalOutcomes, commands []*kgo.Record) {
	b.Helper()
	data := []byte(`{"amount":1,"pad":"` + strings.Repeat("x", 180) + `"}`)
	var jr, cmds []*kgo.Record
	var outs [2][]*kgo.Record // first answers, then the repeats' replays, as the bench's topics have them
	prev := ""
	at := time.Date(2026, 12, 6, 8, 36, 32, 627316479, time.UTC)
	for i := range keys {
		key, e := fmt.Sprintf("k-%d", i), fmt.Sprintf("e-%d", i%10_000)
		start, end := at.Add(time.Duration(i)*time.Millisecond), at.Add(time.Duration(i)*time.Millisecond+50*time.Microsecond)
		rc := schemas.Record{IdempotencyKey: key, Entity: e, Action: "bench.noop", Status: schemas.StatusSucceeded, Attempts: 1,
			Fingerprint: "sha256:90ec21ce4de9d8579268d143f469f89eb3ddb2c132ef66577906bea4b5bf4c49", EntityVersion: 1,
			Result: []byte(`{"noop":true}`), Command: schemas.CommandRef{ID: "n-" + key, Source: "onceflight-bench", Offset: int64(i)},
			StartedAt: &start, FinishedAt: &end, Executor: "bench.executor", Epoch: 1, Data: data,
			EstablishedBy: schemas.EstablishedByAnswer, PrevHash: prev,
			Evidence: []schemas.Evidence{{Kind: schemas.EvidenceAttempt, Attempt: 1, At: start, EndedAt: &end, Answer: schemas.AnswerSucceeded}}}
		if _, err := wire.SealRecord(&rc); err != nil {
			b.Fatal(err)
		}
		prev = rc.Hash
		v, err := wire.MarshalRecord(rc)
		if err != nil {
			b.Fatal(err)
		}
		jr = append(jr, &kgo.Record{Topic: tops.Journal, Offset: int64(i), Key: []byte(key), Value: v,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}})
		for n, replayed := range []bool{false, true} {
			o, err := wire.EncodeOutcome(rc, rc.Command.ID, replayed)
			if err != nil {
				b.Fatal(err)
			}
			o.Topic, o.Offset = tops.Outcomes, int64(n*keys+i)
			outs[n] = append(outs[n], o)
			c, err := schemas.EncodeCommand(schemas.Command{ID: rc.Command.ID, Source: "onceflight-bench", Type: "bench.noop", Subject: e,
				IdempotencyKey: key, Data: data}, schemas.Structured)
			if err != nil {
				b.Fatal(err)
			}
			c.Topic, c.Offset = tops.Commands, int64(n*keys+i)
			cmds = append(cmds, c)
		}
	}
	// A fetch brings journal and outcome records of a partition
	// together, 1 MiB of each: about 1 000 journal records (1 KB) and
	// 800 outcomes (1.3 KB), so the journal runs ahead.
	all := append(outs[0], outs[1]...)
	for len(jr) > 0 || len(all) > 0 {
		n := min(len(jr), 1000)
		journalOutcomes, jr = append(journalOutcomes, jr[:n]...), jr[n:]
		n = min(len(all), 800)
		journalOutcomes, all = append(journalOutcomes, all[:n]...), all[n:]
	}
	return journalOutcomes, cmds
}

// BenchmarkAuditRecords is the audit's work per record read: decoding
// and checking a partition's journal, outcomes and then commands, a
// fetch of 4 000 records at a time, as Run does (without Kafka and the
// temporary store). cpu-ns/record is what `onceflight audit` adds to the raw
// read of the same records.
func BenchmarkAuditRecords(b *testing.B) {
	const keys = 20_000
	jo, cmds := benchTopics(b, keys)
	n := len(jo) + len(cmds)
	feed := func(a *auditor, rs []*kgo.Record) {
		for lo := 0; lo < len(rs); lo += 4000 {
			a.records(rs[lo:min(lo+4000, len(rs))])
		}
	}
	hits := 0
	cpu0 := processCPU(b)
	for b.Loop() {
		a := newAuditor(Input{Topics: tops, CommandPartitions: 1, Committed: map[int32]int64{0: int64(len(cmds))}})
		a.useMemo()
		feed(a, jo)
		a.endJournal(0)
		a.endAnswers()
		feed(a, cmds)
		a.endCommands(0)
		if rep := a.finish(); !rep.OK() || rep.Counts.Outcomes != 2*keys || rep.Counts.Commands != 2*keys {
			b.Fatalf("audit of the bench's topics: %+v", rep)
		}
		hits += a.memoHits
	}
	// CPU, not wall time: the records are decoded on every core, and on
	// a shared machine the wall time is mostly the neighbours'.
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/record")
	// Outcomes whose record was found in the memo rather than decoded.
	b.ReportMetric(float64(hits)/float64(b.N), "memo-hits/op")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
