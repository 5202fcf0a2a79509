package consumer_test

import (
	"testing"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestDataWithoutRecordFormRejected: a command whose data holds a number
// beyond an IEEE 754 double is answered rejected invalid_command, and the
// entity's next command behind it is executed. Its record, hashed over
// the RFC 8785 form that such a number has none of, could not be
// written: the executor restarted consumption from the committed
// watermark again and again, and nothing behind it on the partition was
// answered (the harness's wait for 2 outcomes timed out).
func TestDataWithoutRecordFormRejected(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(t.TempDir())
	// Written by hand: EncodeCommand refuses such data (a producer of
	// another language would not).
	r, err := schemas.EncodeCommand(schemas.Command{ID: "huge", Source: "test", Type: "noop.ping", Subject: "order-9", IdempotencyKey: "k-huge"}, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic, r.Value = "onceflight.commands", []byte(`{"amount":1e400}`)
	h.Produce(r)
	h.Submit("next", "order-9", "k-next", `{"amount":1}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(2, seen, nil)
	rejected := 0
	for id, os := range seen {
		if id != "next" && os[0].Record.Entity == "order-9" && code(os[0]) == schemas.CodeInvalidCommand {
			rejected++
		}
	}
	if rejected != 1 {
		t.Errorf("the command with 1e400 is not answered rejected invalid_command: %+v", seen)
	}
	if o := seen["next"]; len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded {
		t.Errorf("the command behind it: %+v", o)
	}
	if n := h.EffectsOf("order-9", "k-huge"); n != 0 {
		t.Errorf("the command with 1e400 took effect %d times", n)
	}
}
