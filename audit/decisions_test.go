package audit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// An accepted operator decision without a valid signature of a known key
// is a violation; one the executor refused is counted, not a violation;
// a signed one passes; without keys the check is left out and noted.
func TestDecisionsSigned(t *testing.T) {
	key, err := schemas.NewControlKey("ops")
	if err != nil {
		t.Fatal(err)
	}
	keys := &schemas.ControlKeys{Keys: []schemas.ControlKey{key}}
	other, _ := schemas.NewControlKey("ops")
	forger := &schemas.ControlKeys{Keys: []schemas.ControlKey{other}}
	decision := func(id string, off int64, ks *schemas.ControlKeys) *kgo.Record {
		t.Helper()
		data, _ := json.Marshal(map[string]string{"key": "k1", "as": "succeeded", "reason": "checked", "by": "alice"})
		c := schemas.Command{ID: id, Source: "ops", Type: schemas.TypeResolve, Subject: ent, IdempotencyKey: "resolve/k1/" + id, Data: data}
		if ks != nil {
			if err := ks.SignControl(&c); err != nil {
				t.Fatal(err)
			}
		}
		r, err := schemas.EncodeCommand(c, schemas.Binary)
		if err != nil {
			t.Fatal(err)
		}
		r.Topic, r.Partition, r.Offset = tops.Commands, pe, off
		return r
	}
	in := base(t)
	in.Commands = append(in.Commands,
		decision("d-signed", 2, keys),   // accepted, signed: fine
		decision("d-refused", 3, nil),   // unsigned, refused: counted
		decision("d-forged", 4, forger)) // accepted with another key's signature: violation
	in.Outcomes = append(in.Outcomes,
		outcome(t, "resolve/k1/d-signed", ent, "d-signed", schemas.StatusSucceeded, pe, 2),
		outcome(t, "resolve/k1/d-refused", ent, "d-refused", schemas.StatusRejected, pe, 3),
		outcome(t, "resolve/k1/d-forged", ent, "d-forged", schemas.StatusSucceeded, pe, 4))
	in.Committed[pe] = 5

	rep := Check(in)
	for _, c := range rep.Checks {
		if c.Name == CheckDecisionsSigned {
			t.Fatalf("checked without keys: %+v", c)
		}
	}
	if !hasNote(rep, "signatures were not checked") || rep.Counts.Decisions != 3 {
		t.Errorf("without keys: notes %v, decisions %d", rep.Notes, rep.Counts.Decisions)
	}

	in.ControlKeys = keys
	rep = Check(in)
	c := find(rep, CheckDecisionsSigned)
	if c.OK || c.Count != 1 || len(c.Violations) != 1 || !strings.Contains(c.Violations[0].Message, `"d-forged"`) {
		t.Fatalf("decisions_signed = %+v", c)
	}
	if rep.Counts.RefusedDecisions != 1 {
		t.Errorf("refused decisions %d, want 1", rep.Counts.RefusedDecisions)
	}
	for _, name := range []string{CheckHashChain, CheckAnswered, CheckOutcomeIDs, CheckOncePerKey, CheckSingleFlight} {
		if r := find(rep, name); !r.OK {
			t.Errorf("%s: %+v", name, r)
		}
	}
}
