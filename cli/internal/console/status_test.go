package console

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// partStat waits until the overview's line of partition part satisfies ok
// and returns it.
func partStat(t *testing.T, p *Projection, part int32, what string, ok func(PartitionStat) bool) PartitionStat {
	t.Helper()
	var got PartitionStat
	onceflighttest.WaitFor(t, 30*time.Second, what, func() bool {
		for _, ps := range p.Stats().Partitions {
			if ps.Partition == part {
				got = ps
				return ok(ps)
			}
		}
		return false
	})
	return got
}

// TestOverviewShowsHeldPartition: a real executor holds a partition whose
// journal lost records it never read (DeleteRecords standing in for
// retention, as consumer's TestJournalKeptCompleteAndGapsHeld); its
// status record reaches the console, whose overview shows that partition
// held with the executor's reason, and the others processing. Once the
// executor stops, its tombstone leaves every partition unknown.
func TestOverviewShowsHeldPartition(t *testing.T) {
	e := newEnv(t)
	h := e.h
	part := partitioner.ForEntity("order-1", onceflighttest.Partitions)
	other := (part + 1) % onceflighttest.Partitions
	h.Submit("c1", "order-1", "k1", `{}`)
	h.Submit("c2", "order-1", "k2", `{}`)
	waitExec(t, e.p, "order-1", "k2", schemas.StatusSucceeded)
	ps := partStat(t, e.p, part, "the partition processing", func(ps PartitionStat) bool { return ps.State == StateOK })
	if ps.StatusFrom != "test" || ps.Reason != "" {
		t.Fatalf("a processing partition: %+v", ps)
	}

	h.Stop()
	partStat(t, e.p, part, "the partition unknown once its executor stopped", func(ps PartitionStat) bool {
		return ps.State == StateUnknown && strings.Contains(ps.Reason, "no executor status")
	})
	var off int64 = -1
	for _, r := range h.Journal(part) {
		if string(r.Key) == "k2" && off < 0 {
			off = r.Offset
		}
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: schemas.DefaultJournalTopic, Partition: part, At: off})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := kadm.NewClient(h.Client()).DeleteRecords(ctx, os); err != nil || resp.Error() != nil {
		t.Fatalf("delete journal records: %v %v", err, resp.Error())
	}
	h.Start(filepath.Join(t.TempDir(), "fresh"))
	onceflighttest.WaitFor(t, 30*time.Second, "the executor holding the partition", func() bool {
		return strings.Contains(h.Ex.NotReady(), "held")
	})
	ps = partStat(t, e.p, part, "the partition held in the console", func(ps PartitionStat) bool { return ps.State == StateHeld })
	if ps.StatusFrom != "test" || !strings.Contains(ps.Reason, "journal gap") {
		t.Fatalf("held partition: %+v, want the executor's reason naming the journal", ps)
	}
	partStat(t, e.p, other, "another partition processing", func(ps PartitionStat) bool { return ps.State == StateOK })

	code, body := get(t, e.url+"/", e.operator)
	if code != 200 || !strings.Contains(body, `data-state="held"`) || !strings.Contains(body, "status of test,") {
		t.Fatalf("overview %d does not show the held partition: %s", code, body)
	}
}

// TestStatusStaleUnknownAndBadIgnored: a status older than three of its
// executor's periods shows its partitions as unknown, never processing;
// records of the status topic that are not statuses are skipped with a
// log line and counted, and do not hide the good ones.
func TestStatusStaleUnknownAndBadIgnored(t *testing.T) {
	h := onceflighttest.New(t)
	adm := kadm.NewClient(h.Client())
	ctx := context.Background()
	// The executors' topics, but no status topic yet: executors of an
	// older build. The console reads it once it appears.
	if _, err := adm.CreateTopics(ctx, onceflighttest.Partitions, 1, nil, schemas.DefaultCommandsTopic, schemas.DefaultJournalTopic, schemas.DefaultOutcomesTopic); err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	p, _ := runProjection(t, t.TempDir(), h.Brokers, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))

	partStat(t, p, 0, "partition 0 unknown before any status", func(ps PartitionStat) bool {
		return ps.State == StateUnknown && strings.Contains(ps.Reason, "no executor status")
	})
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, schemas.DefaultStatusTopic); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	status := func(ex string, at time.Time, owned ...int32) *kgo.Record {
		s := schemas.ExecutorStatus{Executor: ex, At: at, EveryMS: 1000, Ready: true, Owned: owned}
		return &kgo.Record{Topic: schemas.DefaultStatusTopic, Key: []byte(ex), Value: wire.EncodeStatus(s)}
	}
	for _, r := range []*kgo.Record{
		{Topic: schemas.DefaultStatusTopic, Key: []byte("junk"), Value: []byte("{not json")},
		{Topic: schemas.DefaultStatusTopic, Key: []byte("other"), Value: wire.EncodeStatus(schemas.ExecutorStatus{Executor: "someone", At: now, EveryMS: 1000})},
		status("ex-stale", now.Add(-time.Minute), 0),
		status("ex-live", now.Add(time.Hour), 1), // current for the test's length
	} {
		if err := h.Client().ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ps := partStat(t, p, 0, "partition 0 unknown: its status is stale", func(ps PartitionStat) bool { return ps.StatusFrom == "ex-stale" })
	if ps.State != StateUnknown || !strings.Contains(ps.Reason, "old") {
		t.Fatalf("stale status: %+v, want unknown saying how old", ps)
	}
	partStat(t, p, 1, "partition 1 processing", func(ps PartitionStat) bool { return ps.State == StateOK && ps.StatusFrom == "ex-live" })
	if ps := partStat(t, p, 2, "partition 2", func(PartitionStat) bool { return true }); ps.State != StateUnknown {
		t.Fatalf("partition no status names: %+v, want unknown", ps)
	}
	if n := p.Stats().BadStatus; n != 2 {
		t.Fatalf("%d bad status records counted, want 2", n)
	}
	for _, want := range []string{"skipped a status record it cannot decode", "topic=onceflight.status partition=0 offset=0 ", `key \"other\" is not its executor \"someone\"`} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestPartitionState: the newest status naming a partition decides;
// halted before held before paused; stale (over three periods) is
// unknown whatever it says.
func TestPartitionState(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	st := func(ex string, ago time.Duration, mod func(*schemas.ExecutorStatus)) schemas.ExecutorStatus {
		s := schemas.ExecutorStatus{Executor: ex, At: now.Add(-ago), EveryMS: 10000, Owned: []int32{0, 1, 2}}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	for _, c := range []struct {
		name     string
		statuses []schemas.ExecutorStatus
		part     int32
		want     string
		from     string
	}{
		{"fresh", []schemas.ExecutorStatus{st("a", 5*time.Second, nil)}, 1, StateOK, "a"},
		{"just current", []schemas.ExecutorStatus{st("a", 30*time.Second, nil)}, 1, StateOK, "a"},
		{"stale", []schemas.ExecutorStatus{st("a", 31*time.Second, nil)}, 1, StateUnknown, "a"},
		{"stale held", []schemas.ExecutorStatus{st("a", time.Hour, func(s *schemas.ExecutorStatus) {
			s.Held = []schemas.HeldPartition{{Partition: 1, Reason: "gap"}}
		})}, 1, StateUnknown, "a"},
		{"not owned", []schemas.ExecutorStatus{st("a", 0, nil)}, 7, StateUnknown, ""},
		{"held", []schemas.ExecutorStatus{st("a", 0, func(s *schemas.ExecutorStatus) {
			s.Held = []schemas.HeldPartition{{Partition: 1, Reason: "gap"}}
		})}, 1, StateHeld, "a"},
		{"paused", []schemas.ExecutorStatus{st("a", 0, func(s *schemas.ExecutorStatus) { s.Paused = []int32{2} })}, 2, StatePaused, "a"},
		{"halted", []schemas.ExecutorStatus{st("a", 0, func(s *schemas.ExecutorStatus) {
			s.Halted, s.Paused = "partition count changed", []int32{2}
		})}, 2, StateHalted, "a"},
		{"newest owner wins", []schemas.ExecutorStatus{st("old", time.Minute, nil), st("new", time.Second, func(s *schemas.ExecutorStatus) { s.Paused = []int32{0} })}, 0, StatePaused, "new"},
	} {
		m := map[string]schemas.ExecutorStatus{}
		for _, s := range c.statuses {
			m[s.Executor] = s
		}
		state, reason, from, _ := partitionState(c.part, m, now)
		if state != c.want || from != c.from {
			t.Errorf("%s: state %q from %q (%s), want %q from %q", c.name, state, from, reason, c.want, c.from)
		}
		if (state == StateUnknown || state == StateHeld || state == StateHalted) && reason == "" {
			t.Errorf("%s: %s without a reason", c.name, state)
		}
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
