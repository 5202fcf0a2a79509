package onceflighttest

import (
	"context"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// Audit runs onceflight audit on the harness's topics and fails the test
// on any violation: the audit is the outside check that what the
// executors published keeps the once-only guarantees.
func (h *Harness) Audit() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Brokers...))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	rep, err := audit.Run(ctx, audit.Options{Client: cl})
	if err != nil {
		h.t.Fatalf("audit: %v", err)
	}
	if !rep.OK() {
		var b strings.Builder
		_ = rep.WriteText(&b)
		h.t.Fatalf("audit failed:\n%s", b.String())
	}
}

// ReadAll reads every committed record of topic partition p, up to its
// end offset at the time of the call (control records skipped).
func (h *Harness) ReadAll(topic string, p int32) []*kgo.Record {
	h.t.Helper()
	return h.readAll(topic, p, 15*time.Second)
}

// Journal reads every committed record of journal partition p, up to its
// end offset at the time of the call (control records skipped).
func (h *Harness) Journal(p int32) []*kgo.Record {
	h.t.Helper()
	return h.readAll("onceflight.journal", p, 10*time.Second)
}

func (h *Harness) readAll(topic string, p int32, timeout time.Duration) []*kgo.Record {
	h.t.Helper()
	return kafkatest.ReadAll(h.t, h.Brokers, topic, p, timeout)
}

// JournalAll reads every committed journal record of the harness's
// partitions, decoded (epoch markers and other kinds skipped).
func (h *Harness) JournalAll() []schemas.Record {
	h.t.Helper()
	var out []schemas.Record
	for p := range int32(Partitions) {
		for _, r := range h.Journal(p) {
			if k := wire.JournalKind(r); k != schemas.KindRecord {
				continue
			}
			rec, err := schemas.UnmarshalRecord(r.Value)
			if err != nil {
				h.t.Fatalf("journal %d/%d: %v", p, r.Offset, err)
			}
			out = append(out, rec)
		}
	}
	return out
}

// AllOutcomes reads every committed outcome event, by causation id.
func (h *Harness) AllOutcomes() map[string][]schemas.Outcome {
	h.t.Helper()
	seen := map[string][]schemas.Outcome{}
	for p := range int32(Partitions) {
		for _, r := range h.ReadAll("onceflight.outcomes", p) {
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				h.t.Fatalf("undecodable outcome: %v", err)
			}
			seen[o.CausationID] = append(seen[o.CausationID], o)
		}
	}
	return seen
}

// GroupMembers lists the member ids of the executors' consumer group.
func (h *Harness) GroupMembers() []string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dg, err := kadm.NewClient(h.Client()).DescribeGroups(ctx, "onceflight")
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, g := range dg {
		for _, m := range g.Members {
			ids = append(ids, m.MemberID)
		}
	}
	return ids
}
