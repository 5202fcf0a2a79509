package audit

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// A release recorded as applied (at t0) after its decision's signed
// not_after is an evidence violation — an executor of an earlier build,
// which ignores not_after, applied a replayed decision; one applied before
// it, within a minute after it (the executor stamps the record a lookup
// after its check), or with no not_after (an earlier build's decision) is
// not.
func TestDecisionAppliedAfterNotAfter(t *testing.T) {
	keys, _ := opsKeys(t)
	release := func(notAfter time.Time) *kgo.Record {
		data, _ := json.Marshal(schemas.Decision{Key: "k1", Reason: "run again", By: "alice", NotAfter: notAfter})
		c := schemas.Command{ID: "d-1", Source: "ops", Type: schemas.TypeRelease, Subject: ent, IdempotencyKey: "release/d-1", Data: data}
		if err := keys.SignControl(&c); err != nil {
			t.Fatal(err)
		}
		r, err := schemas.EncodeCommand(c, schemas.Binary)
		if err != nil {
			t.Fatal(err)
		}
		r.Topic, r.Partition, r.Offset = tops.Commands, pe, 2
		return r
	}
	setup := func(decision *kgo.Record) Input {
		in := base(t)
		off := int64(2)
		rel := rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0)
		rel.rec.Release = &schemas.Resolution{By: "alice", At: t0, Reason: "run again", As: schemas.StatusSucceeded, DecisionID: "d-1", Offset: &off}
		in.Journal = journal(t, pe, marker(1), rec("k1", ent, schemas.StatusInProgress, 1, 1, 0), rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0), rel,
			rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second), rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Second))
		return withDecision(t, in, decision, keys)
	}
	for _, tt := range []struct {
		name     string
		notAfter time.Time
		problem  string // "" = the evidence check holds
	}{
		{"applied before its not_after", t0.Add(time.Hour), ""},
		{"applied seconds after its not_after", t0.Add(-30 * time.Second), ""},
		{"applied a day after its not_after", t0.Add(-24 * time.Hour), `released by an operator at 2026-01-02T03:04:05Z, but its decision "d-1" expired at 2026-01-01T03:04:05Z (not_after)`},
		{"no not_after", time.Time{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if c := find(Check(setup(release(tt.notAfter))), CheckEvidence); c.OK != (tt.problem == "") || (!c.OK && !strings.Contains(c.Violations[0].Message, tt.problem)) {
				t.Errorf("evidence = %+v, want ok=%v saying %q", c, tt.problem == "", tt.problem)
			}
		})
	}
}
