package consumer_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// An entity's commands spread over consecutive polls, each poll's keys
// read ahead (Store.Prefetch) before the commands of the poll before have
// all run, are answered in order, each repeat with the record of its
// key's first command: a record read ahead before the command that writes
// it ran is not taken for the answer. One and two records a poll put the
// poll boundaries between each pair of commands. (Written for round 22's
// read-ahead branch, s22/pollpipe, not merged; it guards the poll loop as
// it is. Its backlog's repeats mostly reach their entity's worker: their
// key's first command has rarely committed when they are polled.)
func TestOrderKeptAcrossPolls(t *testing.T) {
	for _, poll := range []int{1, 2} {
		t.Run(fmt.Sprintf("poll=%d", poll), func(t *testing.T) {
			h := onceflighttest.New(t)
			h.Tune = func(c *consumer.Config) { c.MaxPollRecords = poll }
			dir := t.TempDir()
			h.Start(dir) // creates the topics
			seen := map[string][]schemas.Outcome{}
			h.Submit("w", "warm", "w", `{}`)
			h.Outcomes(1, seen, nil)
			h.Stop()

			// A backlog, so that the polls follow each other at once.
			type cmd struct{ id, entity, key, first string }
			cmds := []cmd{
				{"a1", "e", "k1", "a1"}, {"a2", "e", "k1", "a1"}, {"b1", "f", "k1", "b1"},
				{"a3", "e", "k2", "a3"}, {"a4", "e", "k1", "a1"}, {"a5", "e", "k2", "a3"},
				{"b2", "f", "k1", "b1"}, {"a6", "e", "k3", "a6"}, {"a7", "e", "k3", "a6"},
				{"a8", "e", "k2", "a3"},
			}
			for _, c := range cmds {
				h.Submit(c.id, c.entity, c.key, fmt.Sprintf(`{"k":%q}`, c.key))
			}
			h.Start(dir)
			h.Outcomes(1+len(cmds), seen, nil)

			for _, c := range cmds {
				o := seen[c.id]
				if len(o) != 1 {
					t.Fatalf("%s: %d outcomes, want 1", c.id, len(o))
				}
				first := seen[c.first][0]
				if repeat := c.id != c.first; o[0].Replayed != repeat || o[0].Record.Hash != first.Record.Hash {
					t.Fatalf("%s (%s of %s): replayed %v, record %s; want replayed %v, %s's record %s",
						c.id, c.key, c.entity, o[0].Replayed, o[0].Record.Hash, repeat, c.first, first.Record.Hash)
				}
			}
			for _, ent := range []string{"e", "f"} {
				var want, got []string
				for _, c := range cmds {
					if c.entity == ent {
						want = append(want, c.id)
					}
				}
				for p := range int32(onceflighttest.Partitions) {
					for _, r := range h.ReadAll("onceflight.outcomes", p) {
						o, err := schemas.DecodeOutcome(r)
						if err != nil {
							t.Fatal(err)
						}
						if o.Record.Entity == ent {
							got = append(got, o.CausationID)
						}
					}
				}
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Fatalf("entity %s's outcomes in order %v, want %v", ent, got, want)
				}
				for _, k := range []string{"k1", "k2", "k3"} {
					if n := h.EffectsOf(ent, k); n > 1 {
						t.Fatalf("%s of %s took effect %d times", k, ent, n)
					}
				}
			}
		})
	}
}
